"""Migration 0005 (the dashboard's queue samples and indexes) on a database with data: rows kept,
the new table usable, and back down again."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

NEW_INDEXES = {
    ("llm_results", "ix_llm_results_completed_at"),
    ("llm_tasks", "ix_llm_tasks_worker_created_at"),
    ("llm_tasks", "ix_llm_tasks_context_created_at"),
    ("audit_logs", "ix_audit_logs_entity_id"),
}


def _indexes(conn: Connection, tables: set[str]) -> set[tuple[str, str]]:
    inspector = inspect(conn)
    return {(table, str(ix["name"])) for table in tables for ix in inspector.get_indexes(table)}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0005_adds_samples_and_indexes_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0004")
    tables = {table for table, _ in NEW_INDEXES}
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, "
                    "completed_at) VALUES ('r1', 't1', 'w1', 'success', '{}', 5)"
                )
            )
            assert not NEW_INDEXES & _indexes(conn, tables)
        SCHEMA.upgrade(target, "0005")
        assert SCHEMA.current_revision(target) == "0005"
        with engine.begin() as conn:
            assert _indexes(conn, tables) >= NEW_INDEXES
            conn.execute(text("INSERT INTO queue_samples (at, queued, running) VALUES (6, 3, 1)"))
            assert list(conn.execute(text("SELECT at, queued, running FROM queue_samples"))) == [
                (6, 3, 1)
            ]
            assert list(conn.execute(text("SELECT id, completed_at FROM llm_results"))) == [
                ("r1", 5)
            ]
        command.downgrade(SCHEMA.alembic_config(target), "0004")
        with engine.connect() as conn:
            assert "queue_samples" not in inspect(conn).get_table_names()
            assert not NEW_INDEXES & _indexes(conn, tables)
            assert list(conn.execute(text("SELECT id FROM llm_results"))) == [("r1",)]
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
