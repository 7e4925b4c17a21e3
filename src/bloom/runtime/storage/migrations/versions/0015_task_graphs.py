"""Task graphs (docs/graphs.md): a task may wait for others (`task_dependencies`, one row per
edge, `settled` once the dependency ended as the task needs), in the new status `blocked` until
its `waiting_on` count reaches 0; a task with dependents says so (`has_dependents`), so that the
one-statement completes of the tasks without any stay as they were. `task_counts` counts
`blocked` too: its triggers are made again with the new status (`counting.recount`).

Columns are added without rebuilding the tables (SQLite's ALTER TABLE ADD COLUMN), so 0011's
triggers on llm_tasks stay until they are replaced here.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bloom.runtime.storage.migrations.counting import recount

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = (
    *("queued", "leased", "running", "completed", "failed", "dead", "cancelled"),
    "awaiting_approval",  # 0014's
)
AFTER = (*BEFORE, "blocked")
CANCELLED_FOR = sa.text("cancelled_for IS NOT NULL")


def upgrade() -> None:
    op.add_column(
        "llm_tasks", sa.Column("dependencies", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "llm_tasks", sa.Column("waiting_on", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "llm_tasks",
        sa.Column("has_dependents", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column("llm_tasks", sa.Column("on_dependency_failure", sa.Text(), nullable=True))
    op.add_column("llm_tasks", sa.Column("cancelled_for", sa.String(), nullable=True))
    op.create_index(
        "ix_llm_tasks_cancelled_for",
        "llm_tasks",
        ["cancelled_for"],
        postgresql_where=CANCELLED_FOR,
        sqlite_where=CANCELLED_FOR,
    )
    op.create_table(
        "task_dependencies",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("depends_on", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("ref", sa.Text(), nullable=True),
        sa.Column("settled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "depends_on", name="pk_task_dependencies"),
    )
    op.create_index("ix_task_dependencies_depends_on", "task_dependencies", ["depends_on"])
    op.add_column(
        "task_counts", sa.Column("blocked", sa.BigInteger(), server_default="0", nullable=False)
    )
    recount(AFTER)


def downgrade() -> None:
    # blocked tasks have no status to go back to but queued (their dependencies forgotten),
    # claimable as queued since their last change (a blocked task has no queued_at)
    op.execute(
        "UPDATE llm_tasks SET status = 'queued', queued_at = COALESCE(queued_at, updated_at) "
        "WHERE status = 'blocked'"
    )
    if op.get_bind().dialect.name == "postgresql":
        # the counting trigger is deferred to the commit, and PostgreSQL alters no table with
        # trigger events pending: counted now, with the function that knows `blocked`
        op.execute("SET CONSTRAINTS task_counts_on_update IMMEDIATE")
        op.execute("SET CONSTRAINTS task_counts_on_update DEFERRED")
    recount(BEFORE)
    op.drop_column("task_counts", "blocked")
    op.drop_index("ix_task_dependencies_depends_on", "task_dependencies")
    op.drop_table("task_dependencies")
    op.drop_index("ix_llm_tasks_cancelled_for", "llm_tasks")
    # ALTER TABLE DROP COLUMN (SQLite 3.35 and later): no rebuild, the triggers stay
    for name in (
        "cancelled_for",
        "on_dependency_failure",
        "has_dependents",
        "waiting_on",
        "dependencies",
    ):
        op.drop_column("llm_tasks", name)
