"""Migration 0014 (approvals) on a database with tasks: `awaiting_approval` counted from then on
by the counting triggers made again, and back down with a task waiting for a decision (it goes
back to the queue, counted as queued, on both databases)."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.migration.test_task_counts_migration import TRIGGERS, add_task, triggers
from tests.support.migrations import empty_database

STATUSES = ("queued", "awaiting_approval", "completed")


def counted(conn: object, status: str) -> int:
    return int(conn.execute(text(f"SELECT SUM({status}) FROM task_counts")).scalar_one())  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0014_counts_tasks_awaiting_approval_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0013")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            add_task(conn, "t1", "queued")
            add_task(conn, "t2", "completed")
        SCHEMA.upgrade(target, "0014")
        with engine.begin() as conn:
            assert "approvals" in inspect(conn).get_table_names()
            conn.execute(text("UPDATE llm_tasks SET status = 'awaiting_approval' WHERE id = 't1'"))
        with engine.begin() as conn:
            assert (counted(conn, "queued"), counted(conn, "awaiting_approval")) == (0, 1)
            assert triggers(conn, kind) >= TRIGGERS
        command.downgrade(SCHEMA.alembic_config(target), "0013")
        with engine.begin() as conn:
            assert "approvals" not in inspect(conn).get_table_names()
            status = conn.execute(text("SELECT status FROM llm_tasks WHERE id = 't1'")).scalar_one()
            assert status == "queued"
            assert counted(conn, "queued") == 1
            add_task(conn, "t3", "queued")  # the triggers of 0013's statuses still count
        with engine.begin() as conn:
            assert counted(conn, "queued") == 2
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
