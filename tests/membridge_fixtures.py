"""Fixtures for the Membridge tests (modules load them with `pytest_plugins`): fresh, migrated
Membridge databases of each kind, and services built on them with a hand-moved clock."""

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from bloom.db.database import resolve_database
from bloom.membridge.container import Container, build_container
from bloom.membridge.storage.schema import SCHEMA
from tests.support.clock import FakeClock
from tests.support.membridge import (
    MEMBRIDGE_TEMPLATE_DB,
    fresh_membridge_postgres_url,
    membridge_settings,
)
from tests.support.postgres import PostgresCluster


@pytest.fixture(scope="session")
def membridge_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("membridge-template") / "membridge.db"
    SCHEMA.upgrade(resolve_database(f"sqlite:///{path}", path.parent))
    return path


@pytest.fixture(scope="session")
def membridge_postgres(postgres: PostgresCluster) -> PostgresCluster:
    """The session's cluster, with a template database holding Membridge's schema."""
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {MEMBRIDGE_TEMPLATE_DB}")
    target = resolve_database(postgres.url(MEMBRIDGE_TEMPLATE_DB), Path())
    SCHEMA.upgrade(target)
    return postgres


@pytest.fixture(params=["sqlite", "postgresql"])
def membridge_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A freshly migrated, empty Membridge database of each kind."""
    if request.param == "sqlite":
        path = tmp_path / "membridge.db"
        shutil.copyfile(request.getfixturevalue("membridge_sqlite_template"), path)
        return f"sqlite:///{path}"
    return fresh_membridge_postgres_url(request.getfixturevalue("membridge_postgres"))


@pytest.fixture
async def membridge_services(
    membridge_db_url: str, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Container]:
    """Membridge's services on a fresh database of each kind, on the hand-moved clock."""
    built = build_container(membridge_settings(membridge_db_url, tmp_path), clock)
    yield built
    await built.close()
