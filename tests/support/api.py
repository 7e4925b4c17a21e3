"""Small helpers for driving the runtime's HTTP API in tests."""

from typing import Any

import httpx

API = "/api/runtime"


async def create_task(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"context_id": "ctx-1", "agent_slug": "default", "prompt": "Say hello"} | fields
    response = await http.post(f"{API}/llm-tasks", json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


async def register_worker(
    http: httpx.AsyncClient, name: str, slots: int = 1, **fields: Any
) -> dict[str, Any]:
    body = {"name": name, "capabilities": {"claude_cli": True, "max_concurrency": slots}} | fields
    response = await http.post(f"{API}/workers", json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


async def claim(http: httpx.AsyncClient, worker: str, wait: float = 0) -> dict[str, Any] | None:
    response = await http.post(f"{API}/workers/{worker}/claim", json={"wait_seconds": wait})
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


def success(output: str = "done", **fields: Any) -> dict[str, Any]:
    return {"status": "success", "output": output, "metrics": {"duration_ms": 5}} | fields


def failure(message: str = "boom", **fields: Any) -> dict[str, Any]:
    return {"status": "error", "error_message": message, "metrics": {"duration_ms": 5}} | fields
