"""Shared fixtures: both databases, a hand-moved clock, the app in-process and its services."""

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from bloom.db.database import resolve_database
from bloom.runtime.app import create_app
from bloom.runtime.container import Container, build_container
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.schema import SCHEMA
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe
from tests.support.net import closed_port
from tests.support.postgres import PostgresCluster, PostgresUnavailable
from tests.support.server import RuntimeProcess
from tests.support.worker import claude_binary

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
NO_MEMBRIDGE = f"http://127.0.0.1:{closed_port()}"
TEMPLATE_DB = "bloom_template"


def unavailable(reason: str) -> None:
    """Skip on a laptop that lacks a part; in CI a missing part is a failure, never a skip."""
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    try:
        cluster = PostgresCluster()
        cluster.start()
    except (PostgresUnavailable, subprocess.CalledProcessError, OSError) as exc:
        unavailable(f"PostgreSQL cluster could not start: {exc}")
        raise
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE_DB}")
    SCHEMA.upgrade(resolve_database(cluster.url(TEMPLATE_DB), Path()))
    yield cluster
    cluster.stop()


def fresh_postgres_url(cluster: PostgresCluster) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    return cluster.url(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "runtime.db"
    SCHEMA.upgrade(resolve_database(f"sqlite:///{path}", path.parent))
    return path


def fresh_sqlite_url(template: Path, directory: Path) -> str:
    path = directory / "runtime.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A freshly migrated, empty database of each kind."""
    if request.param == "sqlite":
        return fresh_sqlite_url(request.getfixturevalue("sqlite_template"), tmp_path)
    return fresh_postgres_url(request.getfixturevalue("postgres"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_settings(database_url: str, data_dir: Path, **overrides: object) -> RuntimeSettings:
    values: dict[str, object] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "api_key": None,
        "access_log": False,
        "reaper_interval_sec": 3600.0,  # tests reap explicitly, on the fake clock
        "claim_recheck_sec": 0.05,
        # Nothing listens there: a test that wants Membridge starts one and says so.
        "membridge_server_url": NO_MEMBRIDGE,
        "membridge_retries": 0,
        "rate_limit_enabled": False,  # tests of the limits turn them on
    }
    return RuntimeSettings(**(values | overrides))  # type: ignore[arg-type]


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path)


@pytest.fixture
async def container(settings: RuntimeSettings, clock: FakeClock) -> AsyncIterator[Container]:
    built = build_container(settings, clock)
    yield built
    await built.db.dispose()


@pytest.fixture
async def client(settings: RuntimeSettings, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process (ASGI transport), lifespan and all."""
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            http.app = app  # type: ignore[attr-defined]
            yield http


@pytest.fixture
def runtime_process(database_url: str, tmp_path: Path) -> Iterator[RuntimeProcess]:
    """A real runtime server process on a fresh database of each kind."""
    process = RuntimeProcess(database_url, tmp_path)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def probe(database_url: str) -> Iterator[DatabaseProbe]:
    """Direct reads of the test database, independent of the runtime's own storage code."""
    db = DatabaseProbe(database_url)
    yield db
    db.close()


@pytest.fixture(scope="session")
def claude() -> Path:
    """The real Claude CLI (pinned, from the project cache): skipped on a laptop without it,
    a failure in CI."""
    path = claude_binary()
    if path is None:
        message = "the Claude CLI is not installed: `bloom claude install` (CI installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
