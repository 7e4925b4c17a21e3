"""The MCP `wait_task` tool without a server: a runtime that refuses one more events stream to
this caller (429) is polled until the task ends, not reported as a failure."""

import json

import httpx
import pytest

from bloom.clients.runtime import RuntimeClient
from bloom.mcp import fleet
from bloom.mcp.fleet import Fleet
from tests.support.wire import task_json


async def test_wait_polls_when_the_runtime_refuses_another_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet, "POLL_SEC", 0.01)
    states = iter(["running", "running", "completed"])

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/events"):
            return httpx.Response(429, headers={"Retry-After": "5"}, json={"error": "Too many"})
        if path == "/api/runtime/llm-tasks/t1":
            body = task_json(next(states, "completed"), worker_id="w1")
            return httpx.Response(200, content=json.dumps(body))
        if path == "/api/runtime/artifacts":
            return httpx.Response(200, json=[])
        return httpx.Response(500)

    async def progress(seen: float, line: str) -> None:
        raise AssertionError("no events were streamed")

    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(handler)) as client:
        view = await Fleet(client).wait("t1", 5, progress)
    assert (view["status"], view["done"]) == ("completed", True)
