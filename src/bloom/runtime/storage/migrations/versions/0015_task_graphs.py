"""Task graphs (docs/graphs.md): a task may wait for others (`task_dependencies`, one row per
edge, `settled` once the dependency ended as the task needs), in the new status `blocked` until
its `waiting_on` count reaches 0; a task with dependents says so (`has_dependents`), so that the
one-statement completes of the tasks without any stay as they were. `task_counts` counts
`blocked` too: its triggers are made again with the new status (0011's, one status more).

Columns are added without rebuilding the tables (SQLite's ALTER TABLE ADD COLUMN), so 0011's
triggers on llm_tasks stay until they are replaced here.

Revision ID: 0015
Revises: 0013
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
AFTER = (*BEFORE, "blocked")
SLOTS = 32
CANCELLED_FOR = sa.text("cancelled_for IS NOT NULL")

# The SQL below is made of this module's constants only (hence the noqa: S608).


def _pg_function(statuses: tuple[str, ...]) -> str:
    """0011's counting function, over `statuses`."""
    return (
        "CREATE OR REPLACE FUNCTION task_counts_count() RETURNS trigger LANGUAGE plpgsql AS $$\n"  # noqa: S608
        "DECLARE\n"
        "  added text := '';\n"
        "  removed text := '';\n"
        "  lease integer := 0;\n"
        "BEGIN\n"
        "  IF TG_TABLE_NAME = 'leases' THEN\n"
        "    lease := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;\n"
        "  ELSE\n"
        "    IF TG_OP <> 'DELETE' THEN added := NEW.status; END IF;\n"
        "    IF TG_OP <> 'INSERT' THEN removed := OLD.status; END IF;\n"
        "  END IF;\n"
        "  UPDATE task_counts SET "
        + ", ".join(
            f"{s} = {s} + (added = '{s}')::integer - (removed = '{s}')::integer" for s in statuses
        )
        + f", leases = leases + lease WHERE slot = txid_current() % {SLOTS};\n"
        "  RETURN NULL;\n"
        "END $$"
    )


def _sqlite_set(statuses: tuple[str, ...], added: str | None, removed: str | None) -> str:
    terms = []
    for s in statuses:
        term = s
        if added is not None:
            term += f" + ({added} = '{s}')"
        if removed is not None:
            term += f" - ({removed} = '{s}')"
        terms.append(f"{s} = {term}")
    return ", ".join(terms)


def _sqlite_triggers(statuses: tuple[str, ...]) -> dict[str, tuple[str, str, str]]:
    """0011's triggers on llm_tasks (those on leases do not change): name: (event, condition,
    SET clause)."""
    return {
        "task_counts_on_insert": ("INSERT", "", _sqlite_set(statuses, "NEW.status", None)),
        "task_counts_on_update": (
            "UPDATE OF status",
            "WHEN OLD.status IS NOT NEW.status",
            _sqlite_set(statuses, "NEW.status", "OLD.status"),
        ),
        "task_counts_on_delete": ("DELETE", "", _sqlite_set(statuses, None, "OLD.status")),
    }


def _count_with(statuses: tuple[str, ...]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_pg_function(statuses))
        return
    for name, (event, condition, assignments) in _sqlite_triggers(statuses).items():
        op.execute(f"DROP TRIGGER {name}")
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON llm_tasks {condition} "  # noqa: S608
            f"BEGIN UPDATE task_counts SET {assignments} WHERE slot = 0; END"
        )


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
    _count_with(AFTER)


def downgrade() -> None:
    # blocked tasks have no status to go back to but queued (their dependencies forgotten)
    op.execute("UPDATE llm_tasks SET status = 'queued' WHERE status = 'blocked'")
    _count_with(BEFORE)
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
