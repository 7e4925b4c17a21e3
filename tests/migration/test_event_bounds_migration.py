"""Migration 0009 (bounded events) on a database with events: each task's stored bytes counted
into `task_event_totals`, the events untouched, and back down."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

EVENT = (
    "INSERT INTO task_events (task_id, seq, type, data, created_at) "
    "VALUES (:task, :seq, :type, :data, 1)"
)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0009_counts_the_stored_events_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0008")
    engine = create_engine(target.sync_url)
    events = [("t1", 1, "text", '"ab"'), ("t1", 2, "tool", "[1,2]"), ("t2", 1, "text", '"é"')]
    try:
        with engine.begin() as conn:
            for task, seq, kind_, data in events:
                conn.execute(text(EVENT), {"task": task, "seq": seq, "type": kind_, "data": data})
        SCHEMA.upgrade(target, "0009")
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT task_id, bytes FROM task_event_totals")).all()
            counted = {str(task): int(size) for task, size in rows}
            assert counted.keys() == {"t1", "t2"}
            assert counted["t1"] >= len("text" + '"ab"' + "tool" + "[1,2]")  # JSONB adds spaces
            assert counted["t2"] == len('text"é"'.encode())  # bytes, not characters
            row = conn.execute(
                text("SELECT dropped_events, dropped_bytes, marker_seq FROM task_event_totals")
            ).first()
            assert tuple(row or ()) == (0, 0, None)
            indexes = {index["name"] for index in inspect(conn).get_indexes("task_events")}
            assert "ix_task_events_created_at" in indexes
        command.downgrade(SCHEMA.alembic_config(target), "0008")
        with engine.connect() as conn:
            inspector = inspect(conn)
            assert "task_event_totals" not in inspector.get_table_names()
            indexes = {index["name"] for index in inspector.get_indexes("task_events")}
            assert "ix_task_events_created_at" not in indexes
            assert conn.execute(text("SELECT count(*) FROM task_events")).scalar_one() == 3
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
