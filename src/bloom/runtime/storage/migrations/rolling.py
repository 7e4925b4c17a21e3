"""The SQL of the results' rollups (migration 0019): `usage_days`, results summed per UTC day,
project (the task's `agent_slug`) and agent CLI, and `result_minutes` and `result_quarters`,
results counted per minute and per quarter of an hour, succeeded and not; kept by triggers on
`llm_results`, in the transaction that writes the result.

PostgreSQL: one plpgsql function for every trigger. A transaction rolls into slot
`txid_current() % 32`, the slot it counts tasks into (`counting.py`), and first locks that slot's
`task_counts` row: every rollup row of a slot is written under that one lock, taken first, so
two transactions never wait on each other's rollup rows in opposite orders (a transaction may
touch several: a batch complete of several projects' tasks). The insert trigger is a deferred
constraint trigger, as the counting ones: it runs at commit, so the lock is held only while the
transaction commits. The update and delete triggers (no path of the runtime updates or deletes
a result: an operator's SQL) run at once, so that a result deleted with its task in one
transaction is taken out under its task's project (at commit the task would be gone). SQLite
has one writer: slot 0, plain triggers.

A result whose task does not exist is not summed per day (its project is unknown), as a usage
report joining results to their tasks leaves it out; it is counted per minute and quarter. The
SQL is made of this module's constants only (hence the noqa: S608).
"""

from collections.abc import Sequence

SLOTS = 32
DAY_MS = 86_400_000
SPANS = {"result_minutes": 60_000, "result_quarters": 900_000}
"""The results counted per span of time: table, span (ms). A bucket of whole spans reads the
longest span's rows (a day in quarters: 96 rows a slot, not 1,440)."""
DEFERRED = "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
SUMMED = (  # usage_days' column: the result's column summed into it
    ("cost_usd", "cost_usd"),
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("tokens_used", "tokens_used"),
    ("num_turns", "num_turns"),
    ("duration_ms", "duration_ms"),
)
USAGE_COLUMNS = ("attempts", "succeeded", "failed", *(name for name, _ in SUMMED))
COUNTED = ("task_id", "status", "completed_at", *(column for _, column in SUMMED))
"""The result's columns a rollup reads: a change to any other needs no trigger."""
PG_FUNCTION = "rollups_roll"
PG_TRIGGERS = {  # name: (event, deferred, condition)
    "rollups_on_result_insert": ("INSERT", True, ""),
    "rollups_on_result_update": (
        f"UPDATE OF {', '.join(COUNTED)}",
        False,
        "WHEN (("
        + ", ".join(f"OLD.{c}" for c in COUNTED)
        + ") IS DISTINCT FROM ("
        + ", ".join(f"NEW.{c}" for c in COUNTED)
        + "))",
    ),
    "rollups_on_result_delete": ("DELETE", False, ""),
}
TRIGGERS = tuple(PG_TRIGGERS)


def _terms(row: str, sign: str, postgres: bool) -> list[str]:
    """What the result `row` (NEW or OLD) adds to usage_days' columns, each times `sign` ('' or
    '-')."""
    as_int = "::integer" if postgres else ""
    return [
        f"{sign}1",
        f"{sign}({row}.status = 'success'){as_int}",
        f"{sign}({row}.status <> 'success'){as_int}",
        *(f"{sign}COALESCE({row}.{column}, 0)" for _, column in SUMMED),
    ]


def _upsert(table: str, key: str, columns: Sequence[str], postgres: bool) -> str:
    """ON CONFLICT on `key`: the values brought added to the row's."""
    target = f"{table}." if postgres else ""
    added = ", ".join(f"{c} = {target}{c} + excluded.{c}" for c in columns)
    return f"ON CONFLICT ({key}) DO UPDATE SET {added}"


def _add(row: str, sign: str, slot: str, postgres: bool) -> str:
    """The upserts adding the result `row` (NEW or OLD) times `sign` ('' or '-') to its day's,
    its minute's and its quarter's rows of `slot`."""
    terms = _terms(row, sign, postgres)
    day = f"{row}.completed_at - {row}.completed_at % {DAY_MS}"
    usage = (
        f"INSERT INTO usage_days (day, project, cli, slot, {', '.join(USAGE_COLUMNS)}) "  # noqa: S608
        f"SELECT {day}, t.agent_slug, t.cli, {slot}, {', '.join(terms)} "
        f"FROM llm_tasks t WHERE t.id = {row}.task_id "
        + _upsert("usage_days", "day, project, cli, slot", USAGE_COLUMNS, postgres)
    )
    counted = [
        f"INSERT INTO {table} (start, slot, succeeded, failed) "  # noqa: S608
        f"VALUES ({row}.completed_at - {row}.completed_at % {span}, {slot}, {terms[1]}, "
        f"{terms[2]}) " + _upsert(table, "start, slot", ("succeeded", "failed"), postgres)
        for table, span in SPANS.items()
    ]
    return "".join(f"{statement};\n" for statement in (usage, *counted))


def pg_function() -> str:
    """PostgreSQL's rolling function, for every trigger: OLD taken out, NEW added."""
    return (
        f"CREATE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "DECLARE\n"
        f"  kept_slot integer := txid_current() % {SLOTS};\n"
        "BEGIN\n"
        "  PERFORM 1 FROM task_counts WHERE slot = kept_slot FOR NO KEY UPDATE;\n"
        "  IF TG_OP <> 'INSERT' THEN\n" + _add("OLD", "-", "kept_slot", True) + "  END IF;\n"
        "  IF TG_OP <> 'DELETE' THEN\n" + _add("NEW", "", "kept_slot", True) + "  END IF;\n"
        "  RETURN NULL;\n"
        "END $$"
    )


def pg_triggers() -> dict[str, str]:
    """PostgreSQL's triggers, name: its CREATE statement."""
    made = {}
    for name, (event, deferred, condition) in PG_TRIGGERS.items():
        kind = f"CONSTRAINT TRIGGER {name}" if deferred else f"TRIGGER {name}"
        timing = DEFERRED if deferred else "FOR EACH ROW"
        made[name] = (
            f"CREATE {kind} AFTER {event} ON llm_results {timing} {condition} "
            f"EXECUTE FUNCTION {PG_FUNCTION}()"
        )
    return made


def sqlite_triggers() -> dict[str, str]:
    """SQLite's triggers, name: its CREATE statement."""
    made = {  # name: (event, body)
        "rollups_on_result_insert": ("INSERT", _add("NEW", "", "0", False)),
        "rollups_on_result_update": (
            f"UPDATE OF {', '.join(COUNTED)}",
            _add("OLD", "-", "0", False) + _add("NEW", "", "0", False),
        ),
        "rollups_on_result_delete": ("DELETE", _add("OLD", "-", "0", False)),
    }
    return {
        name: f"CREATE TRIGGER {name} AFTER {event} ON llm_results BEGIN\n{body}END"
        for name, (event, body) in made.items()
    }


def _counts(status: str) -> str:
    """Succeeded and failed (any status but success) among the rows summed."""
    return (
        f"SUM(CASE WHEN {status} = 'success' THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {status} <> 'success' THEN 1 ELSE 0 END)"
    )


def backfill() -> list[str]:
    """What every result already stored sums to, into slot 0 of the empty rollups (both
    dialects)."""
    day = f"r.completed_at - r.completed_at % {DAY_MS}"
    sums = ", ".join(f"COALESCE(SUM(r.{column}), 0)" for _, column in SUMMED)
    return [
        f"INSERT INTO usage_days (day, project, cli, slot, {', '.join(USAGE_COLUMNS)}) "  # noqa: S608
        f"SELECT {day}, t.agent_slug, t.cli, 0, COUNT(*), {_counts('r.status')}, {sums} "
        "FROM llm_results r JOIN llm_tasks t ON t.id = r.task_id "
        f"GROUP BY {day}, t.agent_slug, t.cli",
        *(
            f"INSERT INTO {table} (start, slot, succeeded, failed) "  # noqa: S608
            f"SELECT completed_at - completed_at % {span}, 0, {_counts('status')} "
            f"FROM llm_results GROUP BY completed_at - completed_at % {span}"
            for table, span in SPANS.items()
        ),
    ]
