"""Migration 0006 (usage as typed columns of results, spend per project and day, budgets) on a
database with results: figures copied from each result's metrics where they have the right
type, nothing invented, each project's spend per day summed from them, and back down."""

import json
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

DAY_MS = 86_400_000
USAGE = ["cost_usd", "input_tokens", "output_tokens", "tokens_used", "num_turns", "duration_ms"]

RESULTS = {
    "full": {
        "duration_ms": 1200,
        "tokens_used": 30,
        "input_tokens": 20,
        "output_tokens": 10,
        "cost_usd": 0.25,
        "num_turns": 2,
        "model": "claude-x",
    },
    "none": {},
    "nulls": {"duration_ms": 5, "tokens_used": None},
    "mistyped": {"duration_ms": "5", "cost_usd": True, "num_turns": 1.5, "model": 7},
}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0006_copies_usage_out_of_metrics_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0005")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            for task, project in (("t1", "alpha"), ("t2", "beta")):
                conn.execute(
                    text(
                        "INSERT INTO llm_tasks (id, context_id, agent_slug, prompt, "
                        "context_hints, policy, created_at, updated_at) "
                        "VALUES (:id, 'c', :p, 'x', '[]', '{}', 1, 1)"
                    ),
                    {"id": task, "p": project},
                )
            for n, (rid, metrics) in enumerate(RESULTS.items()):
                conn.execute(
                    text(
                        "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, "
                        "completed_at) VALUES (:id, :t, 'w', 'success', :m, :at)"
                    ),
                    {"id": rid, "t": "t1", "m": json.dumps(metrics), "at": n},
                )
            for n, day in enumerate((0, 0, 1)):  # beta: two results one day, one the next
                conn.execute(
                    text(
                        "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, "
                        "completed_at) VALUES (:id, 't2', 'w', 'success', :m, :at)"
                    ),
                    {"id": f"b{n}", "m": json.dumps({"cost_usd": 0.5}), "at": day * DAY_MS + n},
                )
        SCHEMA.upgrade(target, "0006")
        with engine.begin() as conn:
            rows = {
                row[0]: tuple(row[1:])
                for row in conn.execute(
                    text(
                        f"SELECT id, {', '.join(USAGE)}, model FROM llm_results "
                        "WHERE id NOT LIKE 'b%'"
                    )
                )
            }
            spend = sorted(conn.execute(text("SELECT project, day, cost_usd FROM project_spend")))
        assert rows == {
            "full": (0.25, 20, 10, 30, 2, 1200, "claude-x"),
            "none": (None,) * 7,
            "nulls": (None, None, None, None, None, 5, None),
            "mistyped": (None,) * 7,
        }
        assert [tuple(row) for row in spend] == [
            ("alpha", 0, 0.25),
            ("beta", 0, 1.0),
            ("beta", DAY_MS, 0.5),
        ]
        command.downgrade(SCHEMA.alembic_config(target), "0005")
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("llm_results")}
            assert not columns & {*USAGE, "model"}
            assert not {"budgets", "project_spend"} & set(inspect(conn).get_table_names())
            assert len(list(conn.execute(text("SELECT id FROM llm_results")))) == len(RESULTS) + 3
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
