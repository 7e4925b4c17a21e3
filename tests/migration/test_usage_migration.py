"""Migration 0006 (usage as typed columns of results) on a database with results: figures copied
from each result's metrics where they have the right type, nothing invented, and back down."""

import json
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

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
            for n, (rid, metrics) in enumerate(RESULTS.items()):
                conn.execute(
                    text(
                        "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, "
                        "completed_at) VALUES (:id, 't', 'w', 'success', :m, :at)"
                    ),
                    {"id": rid, "m": json.dumps(metrics), "at": n},
                )
        SCHEMA.upgrade(target, "0006")
        with engine.begin() as conn:
            rows = {
                row[0]: tuple(row[1:])
                for row in conn.execute(
                    text(f"SELECT id, {', '.join(USAGE)}, model FROM llm_results")
                )
            }
        assert rows == {
            "full": (0.25, 20, 10, 30, 2, 1200, "claude-x"),
            "none": (None,) * 7,
            "nulls": (None, None, None, None, None, 5, None),
            "mistyped": (None,) * 7,
        }
        command.downgrade(SCHEMA.alembic_config(target), "0005")
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("llm_results")}
            assert not columns & {*USAGE, "model"}
            assert len(list(conn.execute(text("SELECT id FROM llm_results")))) == len(RESULTS)
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
