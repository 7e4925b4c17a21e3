"""Membridge's tables (SQLAlchemy Core), with a MetaData of their own.

They can share a database with the runtime's tables: every name starts with `membridge_`, and
Alembic keeps Membridge's revision in `membridge_alembic_version`. Timestamps are epoch-ms
BIGINTs and JSON is JSONB on PostgreSQL, JSON text on SQLite, as in the runtime's tables.
"""

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    false,
)

from bloom.db.columns import NAMING_CONVENTION, JSONType

metadata = MetaData(naming_convention=NAMING_CONVENTION)

agents = Table(
    "membridge_agents",
    metadata,
    Column("name", Text, primary_key=True),
    Column("url", Text, nullable=False, server_default=""),
    Column("status", Text, nullable=False, server_default="unknown"),
    Column("capabilities", JSONType, nullable=False),
    Column("registered_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("last_seen", BigInteger),
)

projects = Table(
    "membridge_projects",
    metadata,
    Column("name", Text, primary_key=True),
    Column("canonical_id", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
Index("ix_membridge_projects_canonical_id", projects.c.canonical_id)

# The heartbeat registry: one row per (project, node), rewritten by each heartbeat.
nodes = Table(
    "membridge_nodes",
    metadata,
    Column("canonical_id", Text, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("obs_count", BigInteger),
    Column("db_sha", Text),
    Column("last_seen", BigInteger, nullable=False),
    Column("reported_last_seen", BigInteger),
    Column("ip_addrs", JSONType, nullable=False),
    Column("registered_at", BigInteger, nullable=False),
    Column("project_id", Text),
    Column("agent_version", Text),
    PrimaryKeyConstraint("canonical_id", "node_id"),
)

heartbeat_projects = Table(
    "membridge_heartbeat_projects",
    metadata,
    Column("canonical_id", Text, primary_key=True),
    Column("project_id", Text, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("last_seen", BigInteger, nullable=False),
)

leadership = Table(
    "membridge_leadership",
    metadata,
    Column("canonical_id", Text, primary_key=True),
    Column("primary_node_id", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("lease_seconds", Integer, nullable=False),
    Column("issued_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)

# The reference's `jobs` table (its jobs.db), with epoch-ms times and a real boolean.
jobs = Table(
    "membridge_jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("action", Text, nullable=False),
    Column("project", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("canonical_id", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("detail", Text),
    Column("stdout", Text),
    Column("stderr", Text),
    Column("returncode", Integer),
    Column("dryrun", Boolean, nullable=False, server_default=false()),
    Column("created_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger),
    Column("request_id", Text),
)
Index("ix_membridge_jobs_created_at", jobs.c.created_at)
Index("ix_membridge_jobs_project_created_at", jobs.c.project, jobs.c.created_at)
