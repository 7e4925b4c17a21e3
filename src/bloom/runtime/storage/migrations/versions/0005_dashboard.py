"""The dashboard's reads: the queue's depth once a minute (`queue_samples`), and the indexes its
listings and charts seek by (results by completion time; tasks by worker and by context, audit
entries by entity, each newest first).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_samples",
        sa.Column("at", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("at", name="pk_queue_samples"),
    )
    op.create_index("ix_llm_results_completed_at", "llm_results", ["completed_at", "status"])
    op.create_index("ix_llm_tasks_worker_created_at", "llm_tasks", ["worker_id", "created_at"])
    op.create_index("ix_llm_tasks_context_created_at", "llm_tasks", ["context_id", "created_at"])
    op.create_index("ix_audit_logs_entity_id", "audit_logs", ["entity_id"])


def downgrade() -> None:
    op.drop_index("ix_audit_logs_entity_id", table_name="audit_logs")
    op.drop_index("ix_llm_tasks_context_created_at", table_name="llm_tasks")
    op.drop_index("ix_llm_tasks_worker_created_at", table_name="llm_tasks")
    op.drop_index("ix_llm_results_completed_at", table_name="llm_results")
    op.drop_table("queue_samples")
