"""Membridge's Alembic scripts build exactly its declared tables, on PostgreSQL and SQLite, and
live beside the runtime's schema in one database without touching it."""

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, create_engine, inspect, text

from bloom.db.database import DatabaseTarget, StorageKind, resolve_database
from bloom.db.migrate import Schema
from bloom.membridge.storage.schema import SCHEMA as MEMBRIDGE_SCHEMA
from bloom.runtime.storage.schema import SCHEMA as RUNTIME_SCHEMA
from tests.support.membridge import empty_postgres_url

MEMBRIDGE_TABLES = {
    "membridge_agents",
    "membridge_projects",
    "membridge_nodes",
    "membridge_heartbeat_projects",
    "membridge_leadership",
    "membridge_jobs",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_target(request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseTarget:
    """A database with no tables at all, of each kind."""
    if request.param == "sqlite":
        return resolve_database(f"sqlite:///{tmp_path / 'empty.db'}", tmp_path)
    return resolve_database(empty_postgres_url(request.getfixturevalue("postgres")), tmp_path)


def with_connection(target: DatabaseTarget, fn: Any) -> Any:
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            return fn(conn)
    finally:
        engine.dispose()


def differences(target: DatabaseTarget, schema: Schema) -> list[Any]:
    """What autogenerate would change to reach `schema.metadata`, looking only at that schema's
    tables (another schema may share the database): tables, columns, types, nullability,
    indexes, and server defaults on PostgreSQL (SQLite reports false ones for '' defaults)."""
    metadata: MetaData = schema.metadata

    def mine(name: str | None, type_: str, _parent: Any) -> bool:
        return type_ != "table" or name in metadata.tables

    def compare(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": target.kind is StorageKind.POSTGRESQL,
                "include_name": mine,
                "version_table": schema.version_table,
            },
        )
        return list(compare_metadata(context, metadata))

    result: list[Any] = with_connection(target, compare)
    return result


def table_names(target: DatabaseTarget) -> set[str]:
    names: set[str] = with_connection(target, lambda conn: set(inspect(conn).get_table_names()))
    return names


def assert_at_head(target: DatabaseTarget, schema: Schema) -> None:
    assert differences(target, schema) == []
    assert schema.current_revision(target) == schema.head_revision()


def test_the_schema_is_membridges_own() -> None:
    assert set(MEMBRIDGE_SCHEMA.metadata.tables) == MEMBRIDGE_TABLES
    assert MEMBRIDGE_SCHEMA.version_table == "membridge_alembic_version"
    assert MEMBRIDGE_SCHEMA.head_revision() == "m0001"
    assert not set(MEMBRIDGE_SCHEMA.metadata.tables) & set(RUNTIME_SCHEMA.metadata.tables)


def test_upgrade_on_an_empty_database_builds_exactly_the_declared_tables(
    empty_target: DatabaseTarget,
) -> None:
    assert MEMBRIDGE_SCHEMA.current_revision(empty_target) is None
    MEMBRIDGE_SCHEMA.upgrade(empty_target)
    assert_at_head(empty_target, MEMBRIDGE_SCHEMA)
    assert table_names(empty_target) == MEMBRIDGE_TABLES | {"membridge_alembic_version"}


def test_the_comparison_would_see_a_missing_column(empty_target: DatabaseTarget) -> None:
    """The check above can fail: drop a column and autogenerate notices."""
    MEMBRIDGE_SCHEMA.upgrade(empty_target)

    def drop(conn: Connection) -> None:
        conn.execute(text("ALTER TABLE membridge_leadership DROP COLUMN epoch"))
        conn.commit()

    with_connection(empty_target, drop)
    [(kind, *_)] = differences(empty_target, MEMBRIDGE_SCHEMA)
    assert kind == "add_column"


@pytest.mark.parametrize("runtime_first", [True, False], ids=["runtime first", "membridge first"])
def test_the_runtime_and_membridge_schemas_share_one_database(
    empty_target: DatabaseTarget, runtime_first: bool
) -> None:
    order = (
        [RUNTIME_SCHEMA, MEMBRIDGE_SCHEMA] if runtime_first else [MEMBRIDGE_SCHEMA, RUNTIME_SCHEMA]
    )
    for schema in order:
        schema.upgrade(empty_target)
    for schema in order:
        assert_at_head(empty_target, schema)
    assert table_names(empty_target) == (
        set(RUNTIME_SCHEMA.metadata.tables)
        | MEMBRIDGE_TABLES
        | {"alembic_version", "membridge_alembic_version"}
    )


def test_upgrading_twice_keeps_data_and_downgrading_leaves_the_runtime_alone(
    empty_target: DatabaseTarget,
) -> None:
    RUNTIME_SCHEMA.upgrade(empty_target)
    MEMBRIDGE_SCHEMA.upgrade(empty_target)

    def seed(conn: Connection) -> None:
        conn.execute(text("INSERT INTO runtime_settings (key, value) VALUES ('k', 'kept')"))
        conn.execute(
            text(
                "INSERT INTO membridge_projects (name, canonical_id, created_at) "
                "VALUES ('garden', 'c', 1)"
            )
        )
        conn.commit()

    def read(conn: Connection) -> tuple[list[Any], list[Any]]:
        settings = [tuple(r) for r in conn.execute(text("SELECT key, value FROM runtime_settings"))]
        projects = [tuple(r) for r in conn.execute(text("SELECT name FROM membridge_projects"))]
        return settings, projects

    with_connection(empty_target, seed)
    MEMBRIDGE_SCHEMA.upgrade(empty_target)
    assert with_connection(empty_target, read) == ([("k", "kept")], [("garden",)])
    assert_at_head(empty_target, MEMBRIDGE_SCHEMA)

    command.downgrade(MEMBRIDGE_SCHEMA.alembic_config(empty_target), "base")
    assert MEMBRIDGE_SCHEMA.current_revision(empty_target) is None
    assert table_names(empty_target) == (
        set(RUNTIME_SCHEMA.metadata.tables) | {"alembic_version", "membridge_alembic_version"}
    )
    assert_at_head(empty_target, RUNTIME_SCHEMA)
    MEMBRIDGE_SCHEMA.upgrade(empty_target)
    assert_at_head(empty_target, MEMBRIDGE_SCHEMA)
