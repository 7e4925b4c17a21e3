"""Workers remember whether they spoke to the runtime themselves, and when Membridge last listed
them: the worker sync must not overwrite a worker's own word, and sweeps by both signs of life.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("source", sa.Text(), server_default="api", nullable=False))
        batch.add_column(sa.Column("membridge_seen_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("membridge_seen_at")
        batch.drop_column("source")
