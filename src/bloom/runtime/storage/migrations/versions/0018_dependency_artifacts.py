"""A task's dependency edge says whether its artifacts are passed on with its answer
(`task_dependencies.with_artifacts`, docs/graphs.md); false for every edge before it.

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ALTER TABLE ADD COLUMN, not a batch: no rebuild on SQLite
    op.add_column(
        "task_dependencies",
        sa.Column("with_artifacts", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    # ALTER TABLE DROP COLUMN (SQLite 3.35 and later): no rebuild
    op.drop_column("task_dependencies", "with_artifacts")
