"""Approvals: tool calls a person must decide on (`approvals`, docs/approvals.md), and the
tasks waiting for one counted (`task_counts.awaiting_approval`, the counting triggers made
again with that status).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from bloom.runtime.storage.migrations.counting import recount

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
BEFORE = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
STATUSES = (*BEFORE, "awaiting_approval")


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.String(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=False),
        sa.Column("context_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=True),
        sa.Column("tool_use_id", sa.String(), nullable=False),
        sa.Column("tool_name", sa.Text(), nullable=False),
        sa.Column("tool_input", JSON, nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("on_timeout", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("remember", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("applied_lease", sa.String(), nullable=True),
        sa.Column("notify_at", sa.BigInteger(), nullable=True),
        sa.Column("notify_attempts", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_approvals"),
        sa.UniqueConstraint("lease_id", name="uq_approvals_lease_id"),
    )
    op.create_index("ix_approvals_task_id", "approvals", ["task_id"])
    op.create_index("ix_approvals_status_expires_at", "approvals", ["status", "expires_at"])
    op.create_index("ix_approvals_context_id", "approvals", ["context_id"])
    op.create_index("ix_approvals_notify_at", "approvals", ["notify_at"])
    # No task is awaiting approval before this revision: the new count starts at 0.
    op.add_column(
        "task_counts",
        sa.Column("awaiting_approval", sa.BigInteger(), server_default="0", nullable=False),
    )
    recount(STATUSES)


def downgrade() -> None:
    # a task waiting for a decision can only wait in the queue (its run asks again)
    op.execute("UPDATE llm_tasks SET status = 'queued' WHERE status = 'awaiting_approval'")
    if op.get_bind().dialect.name == "postgresql":
        # the counting trigger is deferred to the commit, and PostgreSQL alters no table with
        # trigger events pending: counted now, with the function that knows the status
        op.execute("SET CONSTRAINTS task_counts_on_update IMMEDIATE")
        op.execute("SET CONSTRAINTS task_counts_on_update DEFERRED")
    recount(BEFORE)
    # ALTER TABLE DROP COLUMN (SQLite 3.35 and later): no rebuild, which the triggers on
    # leases (they update task_counts) would not survive
    op.drop_column("task_counts", "awaiting_approval")
    op.drop_table("approvals")
