"""A task's events are bounded: `task_event_totals` counts what each task stored and dropped
(filled from the events already stored), and `task_events.created_at` is indexed for the
retention's pruning.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# What each task's stored events weigh, as the runtime counts them: the type and the data's JSON
# text in UTF-8 bytes (PostgreSQL's JSONB text spaces its separators: a little more).
BACKFILL = {
    "postgresql": "INSERT INTO task_event_totals (task_id, bytes) SELECT task_id, "
    "SUM(octet_length(type) + octet_length(data::text)) FROM task_events GROUP BY task_id",
    "sqlite": "INSERT INTO task_event_totals (task_id, bytes) SELECT task_id, "
    "SUM(length(CAST(type AS BLOB)) + length(CAST(data AS BLOB))) FROM task_events "
    "GROUP BY task_id",
}


def upgrade() -> None:
    op.create_table(
        "task_event_totals",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("dropped_events", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("dropped_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("marker_seq", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("task_id", name="pk_task_event_totals"),
    )
    op.create_index("ix_task_events_created_at", "task_events", ["created_at"])
    op.execute(BACKFILL[op.get_bind().dialect.name])


def downgrade() -> None:
    op.drop_index("ix_task_events_created_at", table_name="task_events")
    op.drop_table("task_event_totals")
