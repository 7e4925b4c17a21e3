"""Migration 0015 (task graphs) on a database with tasks in every status of 0014 and leases:
the new columns filled for them as for a task without dependencies, `blocked` counted from then
on (the counting triggers made again), the edges' table and its index made; and back down on
both databases: a blocked task becomes a claimable queued one (its queued time set), the edges
and the columns go, the counts stay right and keep counting."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

BEFORE = (
    "queued",
    "leased",
    "running",
    "completed",
    "failed",
    "dead",
    "cancelled",
    "awaiting_approval",
)
TASKS = {
    "t1": "queued",
    "t2": "running",
    "t3": "completed",
    "t4": "failed",
    "t5": "awaiting_approval",
    "t6": "cancelled",
}
GRAPH_COLUMNS = {
    "dependencies",
    "waiting_on",
    "has_dependents",
    "on_dependency_failure",
    "cancelled_for",
}


def add_task(conn: Connection, task_id: str, status: str, **more: object) -> None:
    columns = ["id", "context_id", "agent_slug", "prompt", "context_hints", "policy", "status"]
    columns += ["created_at", "updated_at", *more]
    values = [":id", "'c'", "'a'", "'x'", "'[]'", "'{}'", ":s", "1", "7", *(f":{k}" for k in more)]
    conn.execute(
        text(f"INSERT INTO llm_tasks ({', '.join(columns)}) VALUES ({', '.join(values)})"),
        {"id": task_id, "s": status, **more},
    )


def add_lease(conn: Connection, lease_id: str, task_id: str) -> None:
    conn.execute(
        text(
            "INSERT INTO leases (id, task_id, worker_id, started_at, expires_at, ttl_seconds, "
            "last_heartbeat) VALUES (:id, :t, 'w', 1, 2, 60, 1)"
        ),
        {"id": lease_id, "t": task_id},
    )


def kept(engine: Engine, statuses: tuple[str, ...]) -> dict[str, int]:
    sums = ", ".join(f"SUM({name})" for name in (*statuses, "leases"))
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT {sums} FROM task_counts")).one()
    return {name: int(n) for name, n in zip((*statuses, "leases"), row, strict=True) if n}


def columns(conn: Connection, table: str) -> set[str]:
    return {column["name"] for column in inspect(conn).get_columns(table)}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0015_on_stored_tasks_up_and_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0014")
    engine = create_engine(target.sync_url)
    after = (*BEFORE, "blocked")
    try:
        with engine.begin() as conn:
            for task_id, status in TASKS.items():
                add_task(conn, task_id, status)
            add_lease(conn, "l1", "t2")
            add_lease(conn, "l2", "t3")
        counted = {"queued": 1, "running": 1, "completed": 1, "failed": 1}
        counted |= {"awaiting_approval": 1, "cancelled": 1, "leases": 2}
        assert kept(engine, BEFORE) == counted

        SCHEMA.upgrade(target, "0015")
        assert kept(engine, after) == counted  # blocked: 0
        with engine.connect() as conn:
            assert columns(conn, "llm_tasks") >= GRAPH_COLUMNS
            rows = conn.execute(
                text(
                    "SELECT id, status, dependencies, waiting_on, has_dependents, "
                    "on_dependency_failure, cancelled_for FROM llm_tasks ORDER BY id"
                )
            ).all()
            assert [(r[0], r[1]) for r in rows] == sorted(TASKS.items())
            assert {tuple(r[2:]) for r in rows} == {(0, 0, False, None, None)}
            assert conn.execute(text("SELECT count(*) FROM task_dependencies")).scalar_one() == 0
            indexes = {ix["name"] for ix in inspect(conn).get_indexes("task_dependencies")}
            assert "ix_task_dependencies_depends_on" in indexes
            task_indexes = {ix["name"] for ix in inspect(conn).get_indexes("llm_tasks")}
            assert "ix_llm_tasks_cancelled_for" in task_indexes

        with engine.begin() as conn:  # a graph on the old rows: t1 waited on by b1 and b2
            conn.execute(text("UPDATE llm_tasks SET has_dependents = true WHERE id = 't1'"))
            for task_id in ("b1", "b2"):
                add_task(conn, task_id, "blocked", dependencies=1, waiting_on=1)
                conn.execute(
                    text(
                        "INSERT INTO task_dependencies (task_id, depends_on, position) "
                        "VALUES (:t, 't1', 0)"
                    ),
                    {"t": task_id},
                )
            add_task(conn, "x1", "cancelled", cancelled_for="t4")
        assert kept(engine, after) == counted | {"blocked": 2, "cancelled": 2}
        with engine.begin() as conn:  # b2 released: counted as it moves
            conn.execute(
                text(
                    "UPDATE llm_tasks SET status = 'queued', waiting_on = 0, queued_at = 9 "
                    "WHERE id = 'b2'"
                )
            )
        assert kept(engine, after) == counted | {"blocked": 1, "queued": 2, "cancelled": 2}

        command.downgrade(SCHEMA.alembic_config(target), "0014")
        with engine.begin() as conn:
            assert "task_dependencies" not in inspect(conn).get_table_names()
            assert not GRAPH_COLUMNS & columns(conn, "llm_tasks")
            assert "blocked" not in columns(conn, "task_counts")
            b1 = conn.execute(text("SELECT status, queued_at FROM llm_tasks WHERE id = 'b1'")).one()
            assert tuple(b1) == ("queued", 7)  # claimable: queued since its last change
            assert conn.execute(text("SELECT count(*) FROM llm_tasks")).scalar_one() == 9
            add_task(conn, "t7", "dead")  # the triggers still count
        assert kept(engine, BEFORE) == counted | {"queued": 3, "cancelled": 2, "dead": 1}

        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
        assert kept(engine, after) == counted | {"queued": 3, "cancelled": 2, "dead": 1}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM task_dependencies")).scalar_one() == 0
    finally:
        engine.dispose()
