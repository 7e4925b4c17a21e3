"""The SQL of `task_counts`' triggers (migration 0011), made for a list of statuses, so that a
migration adding a status (0014: `awaiting_approval`) counts it with the same triggers.

PostgreSQL: one plpgsql function for every trigger (deferred constraint triggers, which run at
commit); SQLite: plain triggers, each with its own SET clause. The SQL is made of the callers'
constants only (hence the noqa: S608).
"""

from collections.abc import Sequence

from alembic import op

SLOTS = 32
DEFERRED = "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
STATUS_CHANGED = "WHEN (OLD.status IS DISTINCT FROM NEW.status)"
PG_TRIGGERS = {  # name: (event, table, condition)
    "task_counts_on_insert": ("INSERT", "llm_tasks", ""),
    "task_counts_on_update": ("UPDATE OF status", "llm_tasks", STATUS_CHANGED),
    "task_counts_on_delete": ("DELETE", "llm_tasks", ""),
    "task_counts_on_lease_insert": ("INSERT", "leases", ""),
    "task_counts_on_lease_delete": ("DELETE", "leases", ""),
}
TASK_TRIGGERS = ("task_counts_on_insert", "task_counts_on_update", "task_counts_on_delete")


def backfill(statuses: Sequence[str]) -> str:
    """What every task and lease already stored counts, into slot 0 (both dialects)."""
    counts = ", ".join((*statuses, "leases"))
    return (
        f"INSERT INTO task_counts (slot, {counts}) SELECT 0, "  # noqa: S608
        + ", ".join(
            f"COALESCE(SUM(CASE WHEN status = '{s}' THEN 1 ELSE 0 END), 0)" for s in statuses
        )
        + ", (SELECT COUNT(*) FROM leases) FROM llm_tasks"
    )


def pg_function(statuses: Sequence[str], *, replace: bool = False) -> str:
    """PostgreSQL's counting function; `added` and `removed` are the statuses a row brings in
    and takes out ('' for none)."""
    create = "CREATE OR REPLACE FUNCTION" if replace else "CREATE FUNCTION"
    return (
        f"{create} task_counts_count() RETURNS trigger LANGUAGE plpgsql AS $$\n"  # noqa: S608
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


def _sqlite_set(statuses: Sequence[str], added: str | None, removed: str | None, lease: int) -> str:
    """The SET clause of a change bringing in the status `added` and taking out `removed`
    (column references, or None), and `lease` leases."""
    terms = []
    for s in statuses:
        term = s
        if added is not None:
            term += f" + ({added} = '{s}')"
        if removed is not None:
            term += f" - ({removed} = '{s}')"
        terms.append(f"{s} = {term}")
    return ", ".join([*terms, f"leases = leases + {lease}"])


def sqlite_triggers(statuses: Sequence[str]) -> dict[str, str]:
    """SQLite's triggers, name: its CREATE statement."""
    made = {  # name: (event, table, condition, SET clause)
        "task_counts_on_insert": (
            "INSERT",
            "llm_tasks",
            "",
            _sqlite_set(statuses, "NEW.status", None, 0),
        ),
        "task_counts_on_update": (
            "UPDATE OF status",
            "llm_tasks",
            "WHEN OLD.status IS NOT NEW.status",
            _sqlite_set(statuses, "NEW.status", "OLD.status", 0),
        ),
        "task_counts_on_delete": (
            "DELETE",
            "llm_tasks",
            "",
            _sqlite_set(statuses, None, "OLD.status", 0),
        ),
        "task_counts_on_lease_insert": (
            "INSERT",
            "leases",
            "",
            _sqlite_set(statuses, None, None, 1),
        ),
        "task_counts_on_lease_delete": (
            "DELETE",
            "leases",
            "",
            _sqlite_set(statuses, None, None, -1),
        ),
    }
    return {
        name: f"CREATE TRIGGER {name} AFTER {event} ON {table} {condition} "  # noqa: S608
        f"BEGIN UPDATE task_counts SET {assignments} WHERE slot = 0; END"
        for name, (event, table, condition, assignments) in made.items()
    }


def recount(statuses: Sequence[str]) -> None:
    """In a migration: count `statuses` from now on (their columns exist), PostgreSQL's function
    replaced, SQLite's task triggers made again."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(pg_function(statuses, replace=True))
        return
    made = sqlite_triggers(statuses)
    for name in TASK_TRIGGERS:
        op.execute(f"DROP TRIGGER {name}")
        op.execute(made[name])
