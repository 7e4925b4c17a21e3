"""The seed's runtime tables, plus the columns and indexes the lease engine needs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
QUEUED = sa.text("status = 'queued'")
ACTIVE = sa.text("status = 'active'")


def upgrade() -> None:
    op.create_table(
        "llm_tasks",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("context_id", sa.Text(), nullable=False),
        sa.Column("agent_slug", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("context_hints", JSON, nullable=False),
        sa.Column("policy", JSON, nullable=False),
        sa.Column("desired_format", sa.Text(), server_default="text", nullable=False),
        sa.Column("status", sa.Text(), server_default="queued", nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("lease_id", sa.String(), nullable=True),
        sa.Column("worker_id", sa.String(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="3", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("request_hash", sa.String(), nullable=True),
        sa.Column("queued_at", sa.BigInteger(), nullable=True),
        sa.Column("not_before", sa.BigInteger(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("session_id", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_llm_tasks"),
    )
    op.create_index(
        "ix_llm_tasks_queue",
        "llm_tasks",
        [sa.text("priority DESC"), "created_at", "id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.create_index(
        "ix_llm_tasks_queued_context",
        "llm_tasks",
        ["context_id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.create_index("ix_llm_tasks_created_at", "llm_tasks", ["created_at"])
    op.create_index("ix_llm_tasks_status_created_at", "llm_tasks", ["status", "created_at"])
    op.create_index("ix_llm_tasks_idempotency_key", "llm_tasks", ["idempotency_key"], unique=True)

    op.create_table(
        "leases",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("ttl_seconds", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("last_heartbeat", sa.BigInteger(), nullable=False),
        sa.Column("context_id", sa.String(), nullable=True),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_leases"),
    )
    op.create_index(
        "ix_leases_active_worker",
        "leases",
        ["worker_id"],
        postgresql_where=ACTIVE,
        sqlite_where=ACTIVE,
    )
    op.create_index(
        "ix_leases_active_expires_at",
        "leases",
        ["expires_at"],
        postgresql_where=ACTIVE,
        sqlite_where=ACTIVE,
    )
    op.create_index("ix_leases_task_id", "leases", ["task_id"])
    op.create_index("ix_leases_context_started_at", "leases", ["context_id", "started_at"])
    op.create_index("ix_leases_started_at", "leases", ["started_at"])

    op.create_table(
        "workers",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), server_default="", nullable=False),
        sa.Column("status", sa.Text(), server_default="unknown", nullable=False),
        sa.Column("capabilities", JSON, nullable=False),
        sa.Column("last_heartbeat", sa.BigInteger(), nullable=True),
        sa.Column("ip_addrs", JSON, nullable=False),
        sa.Column("obs_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("db_sha", sa.Text(), server_default="", nullable=False),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("active_leases", sa.Integer(), server_default="0", nullable=False),
        sa.Column("agent_version", sa.Text(), server_default="unknown", nullable=False),
        sa.Column("os_info", sa.Text(), server_default="", nullable=False),
        sa.Column("install_method", sa.Text(), server_default="manual", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workers"),
    )

    op.create_table(
        "runtime_artifacts",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=True),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("finalized", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("entity_refs", JSON, nullable=False),
        sa.Column("tags", JSON, nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("sha256", sa.String(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("storage", sa.String(), server_default="db", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runtime_artifacts"),
    )
    op.create_index("ix_runtime_artifacts_task_id", "runtime_artifacts", ["task_id"])
    op.create_index("ix_runtime_artifacts_created_at", "runtime_artifacts", ["created_at"])

    op.create_table(
        "llm_results",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=False),
        sa.Column("artifact_id", sa.String(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("metrics", JSON, nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=False),
        sa.Column("lease_id", sa.String(), nullable=True),
        sa.Column("error_code", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_llm_results"),
    )
    op.create_index("ix_llm_results_lease_id", "llm_results", ["lease_id"], unique=True)
    op.create_index("ix_llm_results_task_id", "llm_results", ["task_id"])

    op.create_table(
        "audit_logs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("entity_type", sa.Text(), nullable=False),
        sa.Column("entity_id", sa.String(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_logs"),
    )
    op.create_index("ix_audit_logs_timestamp", "audit_logs", ["timestamp"])
    op.create_index("ix_audit_logs_task_id", "audit_logs", ["task_id"])

    op.create_table(
        "runtime_settings",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_runtime_settings"),
    )

    op.create_table(
        "users",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("username", sa.Text(), nullable=False),
        sa.Column("password", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("username", name="uq_users_username"),
    )


def downgrade() -> None:
    for table in (
        "users",
        "runtime_settings",
        "audit_logs",
        "llm_results",
        "runtime_artifacts",
        "workers",
        "leases",
        "llm_tasks",
    ):
        op.drop_table(table)
