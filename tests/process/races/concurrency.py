"""Sending many requests to a real server at once."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tests.support.api import API
from tests.support.server import RuntimeProcess


def connect(server: RuntimeProcess, connections: int = 64) -> httpx.AsyncClient:
    """A client that keeps `connections` sockets open, so a burst of requests is not queued."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60)


async def open_connections(http: httpx.AsyncClient, n: int) -> None:
    """Open `n` keep-alive connections now, so the burst that follows does not wait on TCP."""
    await asyncio.gather(*(http.get(f"{API}/health") for _ in range(n)))


async def all_at_once(calls: list[Callable[[], Awaitable[httpx.Response]]]) -> list[httpx.Response]:
    """Start every call, then release them together from one gate."""
    gate = asyncio.Event()

    async def gated(call: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        await gate.wait()
        return await call()

    pending = [asyncio.create_task(gated(call)) for call in calls]
    await asyncio.sleep(0)  # every call is now parked at the gate
    gate.set()
    return list(await asyncio.gather(*pending))


def post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    return lambda: http.post(f"{API}/{path}", json=body)
