"""A real `bloom membridge serve` per database, shared by the package's tests: every test names its
own projects, agents and nodes (`unique()`) and reads only what it wrote."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support.membridge import (
    MembridgeProcess,
    fresh_membridge_postgres_url,
)


@pytest.fixture(scope="package", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MembridgeProcess]:
    """One control plane per backend for the module (SQLite: the default file under the data
    dir; PostgreSQL: a database that already holds the runtime's schema)."""
    data_dir = tmp_path_factory.mktemp(f"membridge-{request.param}")
    url = None
    if request.param == "postgresql":
        url = fresh_membridge_postgres_url(request.getfixturevalue("membridge_postgres"))
    process = MembridgeProcess(data_dir, url)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def http(server: MembridgeProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client
