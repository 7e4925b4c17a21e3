"""The real server process: it starts, migrates its database, and serves."""

import http.client
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support.databases import fresh_sqlite_url
from tests.support.membridge import MembridgeProcess
from tests.support.server import RuntimeProcess


def test_serves_health_with_storage_kind(
    runtime_process: RuntimeProcess, database_url: str
) -> None:
    health = httpx.get(f"{runtime_process.url}/api/runtime/health").json()
    assert health["status"] == "ok"
    assert health["service"] == "bloom-runtime"
    assert health["storage"] == database_url.split(":", 1)[0]


def test_idle_connections_outlive_the_clients_keep_alive(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Clients (httpx, browsers) reuse an idle connection for up to 5 s; a server that closed it
    at that same moment would meet the next request with a reset. Both servers keep it longer."""
    runtime = RuntimeProcess(fresh_sqlite_url(sqlite_template, tmp_path), tmp_path)
    membridge = MembridgeProcess(tmp_path / "membridge")
    try:
        with ThreadPoolExecutor() as starting:
            list(starting.map(lambda server: server.start(), (runtime, membridge)))
        connections = [
            (http.client.HTTPConnection("127.0.0.1", server.port, timeout=10), path)
            for server, path in ((runtime, "/api/runtime/health"), (membridge, "/health"))
        ]
        local_ports = []
        for connection, path in connections:
            connection.request("GET", path)
            assert connection.getresponse().read() != b""
            assert connection.sock is not None
            local_ports.append(connection.sock.getsockname()[1])
        time.sleep(6.5)
        for (connection, path), port in zip(connections, local_ports, strict=True):
            connection.request("GET", path)  # on the same socket: a closed one raises here
            assert connection.getresponse().status == 200, path
            assert connection.sock is not None
            assert connection.sock.getsockname()[1] == port
            connection.close()
    finally:
        runtime.stop()
        membridge.stop()
