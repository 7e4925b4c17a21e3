"""A real runtime server on each database, and a client of it."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import RuntimeProcess


@pytest.fixture
def http(runtime_process: RuntimeProcess) -> Iterator[httpx.Client]:
    """A plain HTTP client for the fresh real server."""
    with httpx.Client(base_url=runtime_process.url, timeout=30) as client:
        yield client
