"""Stalled runs: `task_event_totals.last_at` is when a task's newest event arrived (stored or
dropped past the cap), and `leases.stalled_at` when its attempt was found silent for longer than
its `policy.stall_sec`.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task_event_totals") as batch:
        batch.add_column(sa.Column("last_at", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("stalled_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("stalled_at")
    with op.batch_alter_table("task_event_totals") as batch:
        batch.drop_column("last_at")
