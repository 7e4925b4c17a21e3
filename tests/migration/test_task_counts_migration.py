"""Migration 0011 (kept counts) on a database with tasks and leases: the counts filled from them,
kept by the triggers from then on, the agent index made; and back down, rows kept. At head, the
counting triggers are in place on both tables (a SQLite batch migration drops a table's)."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

STATUSES = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
TASKS = {"t1": "queued", "t2": "queued", "t3": "running", "t4": "completed", "t5": "dead"}
TRIGGERS = {
    "task_counts_on_insert",
    "task_counts_on_update",
    "task_counts_on_delete",
    "task_counts_on_lease_insert",
    "task_counts_on_lease_delete",
}


def add_task(conn: Connection, task_id: str, status: str) -> None:
    conn.execute(
        text(
            "INSERT INTO llm_tasks (id, context_id, agent_slug, prompt, context_hints, policy, "
            "status, created_at, updated_at) VALUES (:id, 'c', 'a', 'x', '[]', '{}', :s, 1, 1)"
        ),
        {"id": task_id, "s": status},
    )


def add_lease(conn: Connection, lease_id: str, task_id: str) -> None:
    conn.execute(
        text(
            "INSERT INTO leases (id, task_id, worker_id, started_at, expires_at, ttl_seconds, "
            "last_heartbeat) VALUES (:id, :t, 'w', 1, 2, 60, 1)"
        ),
        {"id": lease_id, "t": task_id},
    )


def kept(engine: Engine) -> dict[str, int]:
    """The counts summed over the slots: the statuses some task is in, and `leases`."""
    sums = ", ".join(f"SUM({name})" for name in (*STATUSES, "leases"))
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT {sums} FROM task_counts")).one()
    return {name: int(n) for name, n in zip((*STATUSES, "leases"), row, strict=True) if n}


def triggers(conn: Connection, kind: str) -> set[str]:
    query = (
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
        if kind == "postgresql"
        else "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    )
    return {str(name) for (name,) in conn.execute(text(query))}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0011_counts_what_is_stored_keeps_counting_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0010")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            for task_id, status in TASKS.items():
                add_task(conn, task_id, status)
            for lease_id, task_id in (("l1", "t3"), ("l2", "t4"), ("l3", "t5"), ("l4", "t5")):
                add_lease(conn, lease_id, task_id)
        SCHEMA.upgrade(target, "0011")
        assert kept(engine) == {"queued": 2, "running": 1, "completed": 1, "dead": 1, "leases": 4}
        with engine.connect() as conn:
            indexes = {ix["name"] for ix in inspect(conn).get_indexes("llm_tasks")}
            assert "ix_llm_tasks_agent_created_at" in indexes
            slots = conn.execute(text("SELECT count(*) FROM task_counts")).scalar_one()
            assert slots == (32 if kind == "postgresql" else 1)
            assert triggers(conn, kind) == TRIGGERS
        with engine.begin() as conn:  # counted as each transaction commits
            add_task(conn, "t6", "queued")
            conn.execute(text("UPDATE llm_tasks SET status = 'leased' WHERE id = 't1'"))
            add_lease(conn, "l5", "t1")
            conn.execute(text("UPDATE llm_tasks SET status = 'running' WHERE id = 't1'"))
            conn.execute(text("UPDATE llm_tasks SET prompt = 'y' WHERE id = 't2'"))  # no status
            conn.execute(text("UPDATE llm_tasks SET status = 'queued' WHERE id = 't2'"))  # same
            conn.execute(text("DELETE FROM leases WHERE id = 'l4'"))
            conn.execute(text("DELETE FROM llm_tasks WHERE id = 't5'"))
        assert kept(engine) == {"queued": 2, "running": 2, "completed": 1, "leases": 4}
        command.downgrade(SCHEMA.alembic_config(target), "0010")
        with engine.begin() as conn:
            inspector = inspect(conn)
            assert "task_counts" not in inspector.get_table_names()
            indexes = {ix["name"] for ix in inspector.get_indexes("llm_tasks")}
            assert "ix_llm_tasks_agent_created_at" not in indexes
            assert not triggers(conn, kind) & TRIGGERS
            add_task(conn, "t7", "failed")  # no trigger left to trip over
            assert conn.execute(text("SELECT count(*) FROM llm_tasks")).scalar_one() == 6
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
        expected = {"queued": 2, "running": 2, "completed": 1, "failed": 1, "leases": 4}
        assert kept(engine) == expected
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_counting_triggers_are_in_place_at_head(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A later migration that rebuilds llm_tasks or leases (SQLite's batch mode copies a table
    into a new one) must create their triggers again, or the counts would stop."""
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target)
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            assert triggers(conn, kind) >= TRIGGERS
    finally:
        engine.dispose()
