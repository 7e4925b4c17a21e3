"""Every GET route answers HEAD on real servers (uvicorn): the GET's status and headers, no body;
an endless event stream answers at once instead of holding the connection."""

from pathlib import Path

import httpx
import pytest

from tests.support.membridge import ADMIN_HEADER, ADMIN_KEY, MembridgeProcess
from tests.support.server import RuntimeProcess


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_runtime_answers_head_for_its_get_routes(runtime_process: RuntimeProcess) -> None:
    with httpx.Client(base_url=runtime_process.url, timeout=10) as http:
        task = http.post(
            "/api/runtime/llm-tasks", json={"context_id": "c", "agent_slug": "a", "prompt": "p"}
        ).json()
        for path in (
            "/api/runtime/health",
            "/api/runtime/stats",
            f"/api/runtime/llm-tasks/{task['id']}",
            "/metrics",
            "/",
        ):
            got, head = http.get(path), http.head(path)
            assert (head.status_code, head.content) == (got.status_code, b""), path
            assert head.headers["content-type"] == got.headers["content-type"], path
            if path in ("/metrics", "/api/runtime/health", "/"):  # bodies that change (uptime,
                # counts, the dashboard's "3 s ago")
                assert int(head.headers["content-length"]) > 0, path
            else:
                assert head.headers["content-length"] == got.headers["content-length"], path
        assert http.head("/api/runtime/llm-tasks/nope").status_code == 404
        stream = http.head(f"/api/runtime/llm-tasks/{task['id']}/events")  # a queued task: endless
        assert (stream.status_code, stream.content) == (200, b"")
        assert http.get("/api/runtime/health").status_code == 200  # the connection serves on


def test_membridge_answers_head(tmp_path: Path) -> None:
    membridge = MembridgeProcess(tmp_path)
    membridge.start()
    try:
        health = httpx.head(f"{membridge.url}/health")
        assert (health.status_code, health.content) == (200, b"")
        assert httpx.head(f"{membridge.url}/agents").status_code == 401
        agents = httpx.head(f"{membridge.url}/agents", headers={ADMIN_HEADER: ADMIN_KEY})
        assert agents.status_code == 200
    finally:
        membridge.stop()
