"""The real server process: it starts, migrates its database, and serves."""

import httpx

from tests.support.server import RuntimeProcess


def test_serves_health_with_storage_kind(
    runtime_process: RuntimeProcess, database_url: str
) -> None:
    health = httpx.get(f"{runtime_process.url}/api/runtime/health").json()
    assert health["status"] == "ok"
    assert health["service"] == "bloom-runtime"
    assert health["storage"] == database_url.split(":", 1)[0]
