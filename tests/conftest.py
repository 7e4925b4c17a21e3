"""Shared fixtures: both databases (runtime and Membridge), a hand-moved clock, the apps in-process
and their services, real server processes, the Claude CLI; and the markers every test gets from
what it uses (`postgres`, `process`, `claude`)."""

import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import coredis
import fastapi.dependencies.models as fastapi_dependencies
import httpx
import psycopg
import pytest

from bloom.db.database import resolve_database
from bloom.membridge.container import Container as MembridgeContainer
from bloom.membridge.container import build_container as build_membridge
from bloom.membridge.storage.schema import SCHEMA as MEMBRIDGE_SCHEMA
from bloom.runtime.app import create_app
from bloom.runtime.container import Container, build_container
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.schema import SCHEMA
from bloom.worker.agents.claude import install as claude_cli
from tests.support.clock import FakeClock
from tests.support.databases import TEMPLATE_DB, fresh_postgres_url, fresh_sqlite_url, make_settings
from tests.support.db import DatabaseProbe
from tests.support.git import GitServer
from tests.support.membridge import (
    MEMBRIDGE_TEMPLATE_DB,
    fresh_membridge_postgres_url,
    membridge_settings,
)
from tests.support.postgres import PostgresCluster, PostgresUnavailable
from tests.support.rate_limits import REDIS, on_redis
from tests.support.required import unavailable
from tests.support.s3 import Bucket, MotoServer, TcpProxy, new_bucket_name
from tests.support.server import RuntimeProcess
from tests.support.worker import claude_binary


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    """Git repositories served over HTTP from the test's directory while the test runs."""
    server = GitServer(tmp_path / "git")
    server.start()
    yield server
    server.stop()


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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "runtime.db"
    SCHEMA.upgrade(resolve_database(f"sqlite:///{path}", path.parent))
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A freshly migrated, empty database of each kind."""
    if request.param == "sqlite":
        return fresh_sqlite_url(request.getfixturevalue("sqlite_template"), tmp_path)
    return fresh_postgres_url(request.getfixturevalue("postgres"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A real S3 endpoint (moto's server), shared by the session; each test takes a new bucket."""
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: MotoServer) -> Bucket:
    """A bucket name no other test uses (made by the code under test, as it must)."""
    return Bucket(s3_server.url, new_bucket_name())


@pytest.fixture
def s3_proxy(s3_server: MotoServer) -> Iterator[TcpProxy]:
    """The S3 endpoint behind a proxy the test can cut (an outage) and restore."""
    proxy = TcpProxy(s3_server.port)
    proxy.start()
    yield proxy
    proxy.stop()


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
        unavailable(
            "the Claude CLI is not installed: `bloom claude install` (make test fetches it)"
        )
    return path


@pytest.fixture
def no_claude_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH holds only a directory of our own (empty unless a test adds to it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    for name in (*claude_cli.BIN_ENV, claude_cli.CACHE_ENV):
        monkeypatch.delenv(name, raising=False)
    return bin_dir


# Membridge's databases and services


@pytest.fixture(scope="session")
def membridge_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("membridge-template") / "membridge.db"
    MEMBRIDGE_SCHEMA.upgrade(resolve_database(f"sqlite:///{path}", path.parent))
    return path


@pytest.fixture(scope="session")
def membridge_postgres(postgres: PostgresCluster) -> PostgresCluster:
    """The session's cluster, with a template database holding Membridge's schema."""
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {MEMBRIDGE_TEMPLATE_DB}")
    target = resolve_database(postgres.url(MEMBRIDGE_TEMPLATE_DB), Path())
    MEMBRIDGE_SCHEMA.upgrade(target)
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
) -> AsyncIterator[MembridgeContainer]:
    """Membridge's services on a fresh database of each kind, on the hand-moved clock."""
    built = build_membridge(membridge_settings(membridge_db_url, tmp_path), clock)
    yield built
    await built.close()


# Redis, for the rate limits shared between processes


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own on the test Redis; its keys are deleted afterwards."""

    async def ping(client: coredis.Redis[bytes]) -> Any:
        return await client.ping()

    try:
        on_redis(ping)
    except Exception as exc:
        unavailable(f"Redis does not answer at {REDIS}: {exc}")
    prefix = f"bloom-test-{uuid.uuid4().hex[:12]}"
    yield prefix

    async def clean(client: coredis.Redis[bytes]) -> int:
        keys: list[str | bytes] = [key async for key in client.scan_iter(match=f"{prefix}*")]
        return await client.delete(keys) if keys else 0

    on_redis(clean)


# Markers from what a test uses, so that tiers and parts can be chosen with -m.

PROCESS_TIER = Path(__file__).parent / "process"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The process tier first: its files are the longest, and xdist hands files out in this
    # order, so the short in-process files fill the end instead of one long file running alone.
    items.sort(key=lambda item: not item.path.is_relative_to(PROCESS_TIER))
    for item in items:
        params = getattr(item, "callspec", None)
        values = params.params.values() if params is not None else ()
        fixtures = getattr(item, "fixturenames", ())
        if "postgres" in fixtures or any(value == "postgresql" for value in values):
            item.add_marker(pytest.mark.postgres)
        if item.path.is_relative_to(PROCESS_TIER):
            item.add_marker(pytest.mark.process)
        if "claude" in fixtures:
            item.add_marker(pytest.mark.claude)
        if "s3_server" in fixtures:
            item.add_marker(pytest.mark.s3)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)


# FastAPI keeps what it learned of each endpoint and dependency in module-wide caches of 4,096
# entries (`_is_*_callable_cached`), holding the callables, and through their closures their
# apps: a test process that builds an app per test kept hundreds of them, 2 to 3 GB per process.
FASTAPI_CALLABLE_CACHES = tuple(
    getattr(fastapi_dependencies, name)
    for name in (
        "_is_gen_callable_cached",
        "_is_async_gen_callable_cached",
        "_is_coroutine_callable_cached",
    )
    if hasattr(fastapi_dependencies, name)
)


def pytest_runtest_teardown() -> None:
    for cache in FASTAPI_CALLABLE_CACHES:
        cache.cache_clear()
