"""Migration 0003 (task events) on a database with data: workers kept, and back down again."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0003_keeps_workers_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0002")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workers (id, node_id, capabilities, ip_addrs, registered_at) "
                    "VALUES ('w1', 'w1', '{}', '[]', 1)"
                )
            )
        SCHEMA.upgrade(target, "0003")
        assert SCHEMA.current_revision(target) == "0003"
        with engine.connect() as conn:
            assert list(conn.execute(text("SELECT id, paused_until FROM workers"))) == [
                ("w1", None)
            ]
            assert "task_events" in inspect(conn).get_table_names()
        command.downgrade(SCHEMA.alembic_config(target), "0002")
        with engine.connect() as conn:
            inspector = inspect(conn)
            assert "task_events" not in inspector.get_table_names()
            columns = {c["name"] for c in inspector.get_columns("workers")}
            assert "paused_until" not in columns
            assert list(conn.execute(text("SELECT id FROM workers"))) == [("w1",)]
    finally:
        engine.dispose()
