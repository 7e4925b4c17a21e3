"""Membridge's tables: agents, projects, the heartbeat registry, leadership choices and jobs.

Revision ID: m0001
Revises:
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "m0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "membridge_agents",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), server_default="", nullable=False),
        sa.Column("status", sa.Text(), server_default="unknown", nullable=False),
        sa.Column("capabilities", JSON, nullable=False),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_membridge_agents"),
    )
    op.create_table(
        "membridge_projects",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_membridge_projects"),
    )
    op.create_index("ix_membridge_projects_canonical_id", "membridge_projects", ["canonical_id"])
    op.create_table(
        "membridge_nodes",
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("obs_count", sa.BigInteger(), nullable=True),
        sa.Column("db_sha", sa.Text(), nullable=True),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.Column("reported_last_seen", sa.BigInteger(), nullable=True),
        sa.Column("ip_addrs", JSON, nullable=False),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("project_id", sa.Text(), nullable=True),
        sa.Column("agent_version", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("canonical_id", "node_id", name="pk_membridge_nodes"),
    )
    op.create_table(
        "membridge_heartbeat_projects",
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("project_id", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("canonical_id", name="pk_membridge_heartbeat_projects"),
    )
    op.create_table(
        "membridge_leadership",
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("primary_node_id", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("lease_seconds", sa.Integer(), nullable=False),
        sa.Column("issued_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("canonical_id", name="pk_membridge_leadership"),
    )
    op.create_table(
        "membridge_jobs",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("stdout", sa.Text(), nullable=True),
        sa.Column("stderr", sa.Text(), nullable=True),
        sa.Column("returncode", sa.Integer(), nullable=True),
        sa.Column("dryrun", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_membridge_jobs"),
    )
    op.create_index("ix_membridge_jobs_created_at", "membridge_jobs", ["created_at"])
    op.create_index(
        "ix_membridge_jobs_project_created_at", "membridge_jobs", ["project", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_membridge_jobs_project_created_at", table_name="membridge_jobs")
    op.drop_index("ix_membridge_jobs_created_at", table_name="membridge_jobs")
    op.drop_table("membridge_jobs")
    op.drop_table("membridge_leadership")
    op.drop_table("membridge_heartbeat_projects")
    op.drop_table("membridge_nodes")
    op.drop_index("ix_membridge_projects_canonical_id", table_name="membridge_projects")
    op.drop_table("membridge_projects")
    op.drop_table("membridge_agents")
