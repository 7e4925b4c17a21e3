"""Migration 0019 (the results' rollups: per day, per minute, per quarter of an hour) on a
database with tasks and results: the rollups filled from them (equal to a full scan), kept by
the triggers from then on (inserts, changes and deletes of results), and back down, rows kept.
At head, the rolling triggers are in place (a SQLite batch migration drops a table's)."""

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.migration.test_task_counts_migration import triggers
from tests.support.migrations import empty_database

DAY = 86_400_000
TRIGGERS = {"rollups_on_result_insert", "rollups_on_result_update", "rollups_on_result_delete"}
TASKS = {"t1": ("a", "claude"), "t2": ("a", "codex"), "t3": ("b", "claude")}
RESULTS = [  # id, task, status, completed_at, cost, input tokens
    ("r1", "t1", "success", DAY + 1_000, 0.5, 10),
    ("r2", "t1", "error", DAY + 2_000, None, 5),
    ("r3", "t2", "success", DAY + 61_000, 0.25, None),
    ("r4", "t3", "success", 2 * DAY + 5_000, 1.0, 7),
    ("r5", "gone", "error", 2 * DAY + 6_000, 2.0, 1),  # a result of no task: per span only
]
SCANNED_DAYS = (
    "SELECT r.completed_at - r.completed_at % 86400000, t.agent_slug, t.cli, COUNT(*), "
    "SUM(CASE WHEN r.status = 'success' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN r.status <> 'success' THEN 1 ELSE 0 END), "
    "COALESCE(SUM(r.cost_usd), 0), COALESCE(SUM(r.input_tokens), 0) "
    "FROM llm_results r JOIN llm_tasks t ON t.id = r.task_id GROUP BY 1, 2, 3"
)
KEPT_DAYS = (
    "SELECT day, project, cli, SUM(attempts), SUM(succeeded), SUM(failed), SUM(cost_usd), "
    "SUM(input_tokens) FROM usage_days GROUP BY 1, 2, 3 HAVING SUM(attempts) <> 0"
)
SPANS = {"result_minutes": 60_000, "result_quarters": 900_000}
SCANNED_SPANS = {
    table: f"SELECT completed_at - completed_at % {span}, "
    "SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status <> 'success' THEN 1 ELSE 0 END) FROM llm_results GROUP BY 1"
    for table, span in SPANS.items()
}
KEPT_SPANS = {
    table: f"SELECT start, SUM(succeeded), SUM(failed) FROM {table} GROUP BY 1 "
    "HAVING SUM(succeeded) <> 0 OR SUM(failed) <> 0"
    for table in SPANS
}


def add_task(conn: Connection, task_id: str, project: str, cli: str) -> None:
    conn.execute(
        text(
            "INSERT INTO llm_tasks (id, context_id, agent_slug, prompt, context_hints, policy, "
            "status, created_at, updated_at, cli) "
            "VALUES (:id, 'c', :p, 'x', '[]', '{}', 'completed', 1, 1, :cli)"
        ),
        {"id": task_id, "p": project, "cli": cli},
    )


def add_result(conn: Connection, result: tuple[Any, ...]) -> None:
    names = ("id", "task", "status", "at", "cost", "tokens")
    conn.execute(
        text(
            "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, completed_at, "
            "cost_usd, input_tokens) VALUES (:id, :task, 'w', :status, '{}', :at, :cost, :tokens)"
        ),
        dict(zip(names, result, strict=True)),
    )


def read(engine: Engine, query: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Rows keyed by their leading columns (a day's three, a span's one), sums as numbers."""
    keys = 3 if query in (KEPT_DAYS, SCANNED_DAYS) else 1
    with engine.connect() as conn:
        return {
            tuple(row[:keys]): tuple(float(n) for n in row[keys:])
            for row in conn.execute(text(query))
        }


def assert_rollups_agree(engine: Engine) -> None:
    assert read(engine, KEPT_DAYS) == read(engine, SCANNED_DAYS)
    for table in SPANS:
        assert read(engine, KEPT_SPANS[table]) == read(engine, SCANNED_SPANS[table])


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0019_rolls_up_what_is_stored_keeps_rolling_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0018")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            for task_id, (project, cli) in TASKS.items():
                add_task(conn, task_id, project, cli)
            for result in RESULTS:
                add_result(conn, result)
        SCHEMA.upgrade(target, "0019")
        assert read(engine, KEPT_DAYS) == {
            (DAY, "a", "claude"): (2, 1, 1, 0.5, 15),
            (DAY, "a", "codex"): (1, 1, 0, 0.25, 0),
            (2 * DAY, "b", "claude"): (1, 1, 0, 1.0, 7),
        }
        assert read(engine, KEPT_SPANS["result_minutes"]) == {
            (DAY,): (1, 1),
            (DAY + 60_000,): (1, 0),
            (2 * DAY,): (1, 1),
        }
        assert read(engine, KEPT_SPANS["result_quarters"]) == {(DAY,): (2, 1), (2 * DAY,): (1, 1)}
        assert_rollups_agree(engine)
        with engine.connect() as conn:
            assert triggers(conn, kind) >= TRIGGERS
            slots = conn.execute(text("SELECT DISTINCT slot FROM usage_days")).scalars().all()
            assert slots == [0]  # the backfill's
        with engine.begin() as conn:  # rolled as each transaction writes
            add_result(conn, ("r6", "t2", "error", DAY + 3_000, 0.125, 3))
            changed = "UPDATE llm_results SET status = 'error', cost_usd = 0.75 WHERE id = 'r1'"
            conn.execute(text(changed))
            conn.execute(text("UPDATE llm_results SET output = 'y' WHERE id = 'r3'"))  # uncounted
            conn.execute(text("UPDATE llm_results SET completed_at = 5 WHERE id = 'r4'"))
            conn.execute(text("DELETE FROM llm_results WHERE id = 'r2'"))
        assert read(engine, KEPT_DAYS) == {
            (0, "b", "claude"): (1, 1, 0, 1.0, 7),
            (DAY, "a", "claude"): (1, 0, 1, 0.75, 10),
            (DAY, "a", "codex"): (2, 1, 1, 0.375, 3),
        }
        assert_rollups_agree(engine)
        command.downgrade(SCHEMA.alembic_config(target), "0018")
        with engine.begin() as conn:
            tables = inspect(conn).get_table_names()
            assert "usage_days" not in tables
            assert not set(SPANS) & set(tables)
            assert not triggers(conn, kind) & TRIGGERS
            add_result(conn, ("r7", "t3", "success", 2 * DAY + 9_000, 0.5, 1))  # nothing to trip
            assert conn.execute(text("SELECT count(*) FROM llm_results")).scalar_one() == 6
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
        assert_rollups_agree(engine)  # filled again, r7 with them
        assert read(engine, KEPT_DAYS)[(2 * DAY, "b", "claude")] == (1, 1, 0, 0.5, 1)
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_rolling_triggers_are_in_place_at_head(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A later migration that rebuilds llm_results (SQLite's batch mode copies a table into a
    new one) must create its triggers again, or the rollups would stop."""
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target)
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            assert triggers(conn, kind) >= TRIGGERS
    finally:
        engine.dispose()
