"""The task list filtered by agent CLI (`?cli=`): an index on (cli, created_at), as the other
equality filters have, so that the listing of a CLI with few or only old tasks reads just them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_llm_tasks_cli_created_at", "llm_tasks", ["cli", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_llm_tasks_cli_created_at", table_name="llm_tasks")
