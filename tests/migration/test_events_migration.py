"""Migration 0003 (task events) on a database with data: workers kept, and back down again."""

import uuid
from pathlib import Path

import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.db.database import DatabaseTarget, resolve_database
from bloom.runtime.storage.schema import SCHEMA
from tests.support.postgres import PostgresCluster


def _create_empty(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> DatabaseTarget:
    if kind == "sqlite":
        return resolve_database(f"sqlite:///{tmp_path / 'm.db'}", tmp_path)
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    name = f"m3_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return resolve_database(cluster.url(name), tmp_path)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0003_keeps_workers_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _create_empty(kind, tmp_path, request)
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
