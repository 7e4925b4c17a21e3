"""Counted, not scanned: `task_counts` holds the tasks per status and the leases ever granted,
kept by triggers in the transaction of every change (filled here from the rows already stored);
and one agent's tasks are indexed newest first, as one worker's and one context's are.

PostgreSQL: the counts are spread over 32 slot rows, a transaction's changes all going to the
slot its id picks (`txid_current() % 32`), so concurrent transactions rarely meet on one row.
The triggers are deferred constraint triggers: they run at commit, so a slot row is locked only
while its transaction commits, and, that row being the last thing it locks, two transactions
never wait on each other through it (no deadlock). SQLite has one writer: slot 0, plain triggers.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUSES = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
SLOTS = 32
COUNTS = ", ".join((*STATUSES, "leases"))

# The SQL below is made of this module's constants only (hence the noqa: S608).

# What every task and lease already stored counts, into slot 0 (both dialects).
BACKFILL = (
    f"INSERT INTO task_counts (slot, {COUNTS}) SELECT 0, "  # noqa: S608
    + ", ".join(f"COALESCE(SUM(CASE WHEN status = '{s}' THEN 1 ELSE 0 END), 0)" for s in STATUSES)
    + ", (SELECT COUNT(*) FROM leases) FROM llm_tasks"
)

# PostgreSQL: one function for every trigger; `added` and `removed` are the statuses a row
# brings in and takes out ('' for none).
PG_FUNCTION = (
    "CREATE FUNCTION task_counts_count() RETURNS trigger LANGUAGE plpgsql AS $$\n"  # noqa: S608
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
        f"{s} = {s} + (added = '{s}')::integer - (removed = '{s}')::integer" for s in STATUSES
    )
    + f", leases = leases + lease WHERE slot = txid_current() % {SLOTS};\n"
    "  RETURN NULL;\n"
    "END $$"
)
DEFERRED = "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
STATUS_CHANGED = "WHEN (OLD.status IS DISTINCT FROM NEW.status)"
PG_TRIGGERS = {  # name: (event, table, condition)
    "task_counts_on_insert": ("INSERT", "llm_tasks", ""),
    "task_counts_on_update": ("UPDATE OF status", "llm_tasks", STATUS_CHANGED),
    "task_counts_on_delete": ("DELETE", "llm_tasks", ""),
    "task_counts_on_lease_insert": ("INSERT", "leases", ""),
    "task_counts_on_lease_delete": ("DELETE", "leases", ""),
}


def _sqlite_set(added: str | None, removed: str | None, lease: int) -> str:
    """The SET clause of a change bringing in the status `added` and taking out `removed`
    (column references, or None), and `lease` leases."""
    terms = []
    for s in STATUSES:
        term = s
        if added is not None:
            term += f" + ({added} = '{s}')"
        if removed is not None:
            term += f" - ({removed} = '{s}')"
        terms.append(f"{s} = {term}")
    return ", ".join([*terms, f"leases = leases + {lease}"])


SQLITE_TRIGGERS = {  # name: (event, table, condition, SET clause)
    "task_counts_on_insert": ("INSERT", "llm_tasks", "", _sqlite_set("NEW.status", None, 0)),
    "task_counts_on_update": (
        "UPDATE OF status",
        "llm_tasks",
        "WHEN OLD.status IS NOT NEW.status",
        _sqlite_set("NEW.status", "OLD.status", 0),
    ),
    "task_counts_on_delete": ("DELETE", "llm_tasks", "", _sqlite_set(None, "OLD.status", 0)),
    "task_counts_on_lease_insert": ("INSERT", "leases", "", _sqlite_set(None, None, 1)),
    "task_counts_on_lease_delete": ("DELETE", "leases", "", _sqlite_set(None, None, -1)),
}


def upgrade() -> None:
    op.create_index("ix_llm_tasks_agent_created_at", "llm_tasks", ["agent_slug", "created_at"])
    op.create_table(
        "task_counts",
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), server_default="0", nullable=False)
            for name in (*STATUSES, "leases")
        ),
        sa.PrimaryKeyConstraint("slot", name="pk_task_counts"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE task_counts SET (fillfactor = 10)")
        # No change may fall between the backfill's count and the triggers: writers wait
        # (tasks before leases, the order the runtime's transactions take them in).
        op.execute("LOCK TABLE llm_tasks, leases IN SHARE ROW EXCLUSIVE MODE")
        op.execute(PG_FUNCTION)
        for name, (event, table, condition) in PG_TRIGGERS.items():
            op.execute(
                f"CREATE CONSTRAINT TRIGGER {name} AFTER {event} ON {table} {DEFERRED} "
                f"{condition} EXECUTE FUNCTION task_counts_count()"
            )
        op.execute(BACKFILL)
        op.execute(f"INSERT INTO task_counts (slot) SELECT generate_series(1, {SLOTS - 1})")
        return
    for name, (event, table, condition, assignments) in SQLITE_TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON {table} {condition} "  # noqa: S608
            f"BEGIN UPDATE task_counts SET {assignments} WHERE slot = 0; END"
        )
    op.execute(BACKFILL)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, (_, table, *_) in PG_TRIGGERS.items():
        op.execute(f"DROP TRIGGER {name} ON {table}" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        op.execute("DROP FUNCTION task_counts_count()")
    op.drop_table("task_counts")
    op.drop_index("ix_llm_tasks_agent_created_at", table_name="llm_tasks")
