"""Workspaces: a task's repository and branch (`llm_tasks.workspace`, and `workspace_key`, which
the claim compares so that one branch is written by one task at a time), and what an attempt did
to it (`llm_results.workspace`). Columns are added without rebuilding the tables (SQLite's
ALTER TABLE ADD COLUMN), so migration 0011's triggers on llm_tasks stay.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
HAS_WORKSPACE = sa.text("workspace_key IS NOT NULL")


def upgrade() -> None:
    op.add_column("llm_tasks", sa.Column("workspace", JSON, nullable=True))
    op.add_column("llm_tasks", sa.Column("workspace_key", sa.Text(), nullable=True))
    op.add_column("llm_results", sa.Column("workspace", JSON, nullable=True))
    op.create_index(
        "ix_llm_tasks_workspace_key",
        "llm_tasks",
        ["workspace_key", "status"],
        postgresql_where=HAS_WORKSPACE,
        sqlite_where=HAS_WORKSPACE,
    )


def downgrade() -> None:
    op.drop_index("ix_llm_tasks_workspace_key", "llm_tasks")
    # ALTER TABLE DROP COLUMN (SQLite 3.35 and later): no rebuild, 0011's triggers stay
    op.drop_column("llm_results", "workspace")
    op.drop_column("llm_tasks", "workspace_key")
    op.drop_column("llm_tasks", "workspace")
