"""A task's agent CLI (`cli`: claude, codex, gemini), "claude" for every task before it
(docs/agents.md).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ALTER TABLE ADD COLUMN, not a batch: no rebuild on SQLite, 0011's triggers stay
    op.add_column("llm_tasks", sa.Column("cli", sa.Text(), server_default="claude", nullable=False))


def downgrade() -> None:
    # ALTER TABLE DROP COLUMN (SQLite 3.35 and later): no rebuild, 0011's triggers stay
    op.drop_column("llm_tasks", "cli")
