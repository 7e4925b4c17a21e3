"""Alembic migrations build exactly the declared tables, on PostgreSQL and SQLite alike."""

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Index, UnaryExpression, create_engine, inspect, text
from sqlalchemy.sql import operators

from bloom.db.database import DatabaseTarget, StorageKind, resolve_database
from bloom.runtime.storage.schema import SCHEMA
from bloom.runtime.storage.tables import metadata
from tests.support.postgres import PostgresCluster

RUNTIME_ENV = ("DATABASE_URL", "BLOOM_DATABASE_URL", "BLOOM_DATA_DIR", "RUNTIME_API_KEY")


@dataclass(frozen=True)
class EmptyDatabase:
    url: str
    target: DatabaseTarget


def create_empty_postgres_database(cluster: PostgresCluster) -> str:
    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return cluster.url(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> EmptyDatabase:
    """A database with no tables at all, of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        url = create_empty_postgres_database(request.getfixturevalue("postgres"))
    return EmptyDatabase(url, resolve_database(url, tmp_path))


def with_connection(target: DatabaseTarget, fn: Any) -> Any:
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            return fn(conn)
    finally:
        engine.dispose()


def schema_differences(target: DatabaseTarget) -> list[Any]:
    """What autogenerate would change to reach `metadata`: tables, columns, types, nullability,
    indexes and unique constraints (and server defaults on PostgreSQL; on SQLite alembic reports
    false differences for '' defaults, so they are left out there)."""

    def compare(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": target.kind is StorageKind.POSTGRESQL,
            },
        )
        return list(compare_metadata(context, metadata))

    result: list[Any] = with_connection(target, compare)
    return result


def normalise_predicate(predicate: str) -> str:
    predicate = predicate.replace("::text", "").strip()
    while predicate.startswith("(") and predicate.endswith(")"):
        predicate = predicate[1:-1].strip()
    return predicate


IndexShape = tuple[bool, tuple[str, ...], str | None]


def declared_indexes(kind: StorageKind) -> dict[str, IndexShape]:
    """Every index `metadata` declares: unique?, columns (with DESC), partial predicate."""
    shapes: dict[str, IndexShape] = {}
    for table in metadata.tables.values():
        for index in table.indexes:
            shapes[str(index.name)] = (
                bool(index.unique),
                tuple(_declared_column(expr) for expr in index.expressions),
                _declared_where(index, kind),
            )
    return shapes


def _declared_column(expr: Any) -> str:
    if isinstance(expr, UnaryExpression) and expr.modifier is operators.desc_op:
        return f"{expr.element.name} DESC"
    return str(expr.name)


def _declared_where(index: Index, kind: StorageKind) -> str | None:
    where = index.dialect_options[str(kind)]["where"]
    return normalise_predicate(str(where)) if where is not None else None


def reflected_indexes(target: DatabaseTarget) -> dict[str, IndexShape]:
    """The indexes the database really has, in the same shape."""

    def reflect(conn: Connection) -> dict[str, IndexShape]:
        inspector = inspect(conn)
        shapes: dict[str, IndexShape] = {}
        for table in inspector.get_table_names():
            for index in inspector.get_indexes(table):
                name = str(index["name"])
                if "duplicates_constraint" in index or name.startswith("sqlite_autoindex"):
                    continue
                where = index.get("dialect_options", {}).get(f"{target.kind}_where")
                shapes[name] = (
                    bool(index["unique"]),
                    _reflected_columns(conn, target.kind, index),
                    normalise_predicate(str(where)) if where is not None else None,
                )
        return shapes

    result: dict[str, IndexShape] = with_connection(target, reflect)
    return result


def _reflected_columns(conn: Connection, kind: StorageKind, index: Any) -> tuple[str, ...]:
    if kind is StorageKind.POSTGRESQL:
        sorting = index.get("column_sorting", {})
        return tuple(
            f"{column} DESC" if "desc" in sorting.get(column, ()) else str(column)
            for column in index["column_names"]
        )
    rows = conn.exec_driver_sql(f"PRAGMA index_xinfo('{index['name']}')").mappings()
    return tuple(f"{r['name']} DESC" if r["desc"] else str(r["name"]) for r in rows if r["key"])


def table_names(target: DatabaseTarget) -> set[str]:
    names: set[str] = with_connection(target, lambda conn: set(inspect(conn).get_table_names()))
    return names


def assert_schema_is_exactly_metadata(target: DatabaseTarget) -> None:
    assert schema_differences(target) == []
    assert reflected_indexes(target) == declared_indexes(target.kind)
    assert table_names(target) == set(metadata.tables) | {"alembic_version"}
    assert SCHEMA.current_revision(target) == SCHEMA.head_revision()


def test_declared_schema_has_the_partial_queue_indexes() -> None:
    """The comparison below is meaningful: the metadata does declare partial and DESC indexes."""
    shapes = declared_indexes(StorageKind.POSTGRESQL)
    assert shapes["ix_llm_tasks_queue"] == (
        False,
        ("priority DESC", "created_at", "id"),
        "status = 'queued'",
    )
    assert shapes["ix_leases_active_worker"] == (False, ("worker_id",), "status = 'active'")
    assert shapes == declared_indexes(StorageKind.SQLITE)


def test_upgrade_on_an_empty_database_builds_exactly_the_declared_schema(
    empty_db: EmptyDatabase,
) -> None:
    """After `upgrade`, autogenerate finds nothing to change: same tables, columns, types,
    nullability and unique constraints; the same indexes, incl. partial predicates and DESC."""
    assert table_names(empty_db.target) == set()
    assert SCHEMA.current_revision(empty_db.target) is None
    SCHEMA.upgrade(empty_db.target)
    assert_schema_is_exactly_metadata(empty_db.target)


def test_upgrading_twice_is_a_no_op(empty_db: EmptyDatabase) -> None:
    """A second upgrade changes nothing: schema, revision and data are as they were."""
    SCHEMA.upgrade(empty_db.target)

    def seed(conn: Connection) -> None:
        conn.execute(text("INSERT INTO runtime_settings (key, value) VALUES ('k', 'kept')"))
        conn.commit()

    with_connection(empty_db.target, seed)
    before = reflected_indexes(empty_db.target)
    SCHEMA.upgrade(empty_db.target)
    assert reflected_indexes(empty_db.target) == before
    assert_schema_is_exactly_metadata(empty_db.target)

    def read(conn: Connection) -> tuple[list[Any], list[Any]]:
        settings = list(conn.execute(text("SELECT key, value FROM runtime_settings")))
        versions = list(conn.execute(text("SELECT version_num FROM alembic_version")))
        return settings, versions

    settings, versions = with_connection(empty_db.target, read)
    assert [tuple(row) for row in settings] == [("k", "kept")]
    assert [tuple(row) for row in versions] == [(SCHEMA.head_revision(),)]


def test_downgrade_to_base_then_upgrade_again(empty_db: EmptyDatabase) -> None:
    """Downgrading to base removes every table; upgrading again rebuilds the exact schema."""
    SCHEMA.upgrade(empty_db.target)
    command.downgrade(SCHEMA.alembic_config(empty_db.target), "base")
    assert table_names(empty_db.target) <= {"alembic_version"}
    assert SCHEMA.current_revision(empty_db.target) is None
    SCHEMA.upgrade(empty_db.target)
    assert_schema_is_exactly_metadata(empty_db.target)


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli_together([list(args)], env=env, cwd=cwd)[0]


def run_cli_together(
    commands: list[list[str]], *, env: dict[str, str], cwd: Path
) -> list[subprocess.CompletedProcess[str]]:
    """Run `bloom <args>` for each entry at the same time (each start costs seconds)."""
    started = [
        (
            args,
            subprocess.Popen(
                [sys.executable, "-m", "bloom.cli.main", *args],
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for args in commands
    ]
    finished = []
    for args, process in started:
        out, err = process.communicate(timeout=120)
        finished.append(subprocess.CompletedProcess(args, process.returncode, out, err))
    return finished


def cli_env(tmp_path: Path, database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RUNTIME_ENV}
    env["BLOOM_DATA_DIR"] = str(tmp_path / "data")
    env["COLUMNS"] = "200"  # keep rich's error boxes on one line each
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return env


@pytest.mark.process
def test_cli_db_upgrade_migrates_an_empty_database(empty_db: EmptyDatabase, tmp_path: Path) -> None:
    """`bloom db upgrade` with the seed's DATABASE_URL migrates the database to head, and
    `bloom db current` then shows the head revision for both the database and the code."""
    env = cli_env(tmp_path, empty_db.url)
    upgraded = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    head = SCHEMA.head_revision()
    assert f"At revision {head}." in upgraded.stdout
    assert_schema_is_exactly_metadata(empty_db.target)
    if empty_db.target.kind is StorageKind.POSTGRESQL:
        # The password-free display form is what the CLI prints, never a password.
        assert empty_db.target.display in upgraded.stdout
    current = run_cli("db", "current", env=env, cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    assert current.stdout.splitlines() == [f"database: {head}", f"head:     {head}"]


@pytest.mark.process
def test_cli_without_database_url_uses_sqlite_under_the_data_dir(tmp_path: Path) -> None:
    """No DATABASE_URL: `bloom db upgrade` creates and migrates <BLOOM_DATA_DIR>/runtime.db."""
    env = cli_env(tmp_path, None)
    upgraded = run_cli("db", "upgrade", env=env, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    path = (tmp_path / "data" / "runtime.db").resolve()
    assert path.is_file()
    assert_schema_is_exactly_metadata(resolve_database(f"sqlite:///{path}", tmp_path))


@pytest.mark.process
def test_cli_refuses_an_unsupported_database_url_clearly(tmp_path: Path) -> None:
    """A MySQL URL is a usage error (exit 2) naming DATABASE_URL and the supported schemes, for
    `db upgrade` and `db current` alike: no traceback, no password echoed."""
    env = cli_env(tmp_path, "mysql://root:hunter2@localhost/bloom")
    results = run_cli_together([["db", "upgrade"], ["db", "current"]], env=env, cwd=tmp_path)
    for result in results:
        output = result.stdout + result.stderr
        assert result.returncode == 2, (result.args, output)
        assert "DATABASE_URL" in output
        assert "Unsupported database URL scheme 'mysql'" in output
        assert "Traceback" not in output
        assert "hunter2" not in output


@pytest.mark.process
def test_concurrent_cli_upgrades_on_postgresql_both_succeed(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    """Two migrators starting together on one PostgreSQL database (several replicas booting)
    serialise on the advisory lock: both succeed and the schema is built once, correctly."""
    url = create_empty_postgres_database(postgres)
    env = cli_env(tmp_path, url)
    results = run_cli_together([["db", "upgrade"], ["db", "upgrade"]], env=env, cwd=tmp_path)
    for result in results:
        assert result.returncode == 0, result.stdout + result.stderr
    assert_schema_is_exactly_metadata(resolve_database(url, tmp_path))
