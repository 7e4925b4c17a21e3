"""A database that cannot be reached: both servers answer 503 with Retry-After in their own
error shape (never a 500, never a traceback), wherever the database is first touched (a route,
the key lookup in front of every route), and `/health` says 503 `unreachable`."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.app import create_app as create_runtime
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.membridge import membridge_settings
from tests.support.net import closed_port

UNREACHABLE = f"postgresql://bloom@127.0.0.1:{closed_port()}/bloom"


@asynccontextmanager
async def serving(
    app: FastAPI, headers: dict[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as http:
            yield http


def unavailable(response: httpx.Response, key: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "2"
    assert response.json() == {key: "Database unavailable, retry shortly"}


async def test_the_runtime_answers_503_while_its_database_is_unreachable(tmp_path: Path) -> None:
    app = create_runtime(make_settings(UNREACHABLE, tmp_path))
    async with serving(app) as http:
        unavailable(await http.get(f"{API}/llm-tasks"), "error")
        body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
        unavailable(await http.post(f"{API}/llm-tasks", json=body), "error")
        unavailable(await http.post(f"{API}/workers/w1/claim", json={}), "error")
        health = await http.get(f"{API}/health")
        assert health.status_code == 503
        assert health.json()["database"] == "unreachable"
        assert health.json()["status"] == "unavailable"


async def test_a_key_looked_up_while_the_database_is_unreachable_is_a_503(tmp_path: Path) -> None:
    """The key lookup runs in a middleware, before any route's error handlers."""
    app = create_runtime(make_settings(UNREACHABLE, tmp_path, api_key="admin-key-123456"))
    async with serving(app, {"X-Runtime-API-Key": "bloom_not_the_admin_key"}) as http:
        unavailable(await http.get(f"{API}/llm-tasks"), "error")


@pytest.mark.parametrize("path", ["/projects", "/agents"])
async def test_membridge_answers_503_while_its_database_is_unreachable(
    tmp_path: Path, path: str
) -> None:
    app = create_membridge(membridge_settings(UNREACHABLE, tmp_path))
    async with serving(app) as http:
        unavailable(await http.get(path), "detail")
        health = await http.get("/health")
        assert health.status_code == 503
        assert health.json()["database"] == "unreachable"
