"""Runtimes and Membridges with their rate limits on, and what a refusal looks like."""

import asyncio
import contextlib
import shutil
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import coredis
import httpx
from fastapi import FastAPI

from bloom.membridge.app import create_app as create_membridge_app
from bloom.runtime.app import create_app
from tests.support.api import API
from tests.support.clock import FakeClock
from tests.support.databases import fresh_sqlite_url, make_settings
from tests.support.membridge import membridge_settings

TOO_MANY = {"error": "Too many requests, please try again later"}

REDIS = "redis://127.0.0.1:6379"

RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy")


class Runtime:
    """An app in-process and its callers, each from a client address of its own."""

    def __init__(self, app: FastAPI):
        self.app = app
        self.clients: list[httpx.AsyncClient] = []

    def caller(
        self, forwarded_for: str | bytes | None = None, *, peer: str = "127.0.0.1"
    ) -> httpx.AsyncClient:
        """Through the proxy at `peer` (trusted in these tests) for `forwarded_for`."""
        value = forwarded_for.encode() if isinstance(forwarded_for, str) else forwarded_for
        headers = {} if value is None else {b"X-Forwarded-For": value}
        transport = httpx.ASGITransport(app=self.app, client=(peer, 4711))
        client = httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


@contextlib.asynccontextmanager
async def runtime(tmp_path: Path, template: Path, **overrides: object) -> AsyncIterator[Runtime]:
    """The runtime on a fresh SQLite database, rate limits on, 127.0.0.1 a trusted proxy."""
    directory = tmp_path / uuid.uuid4().hex[:8]
    directory.mkdir()
    values = {"rate_limit_enabled": True, "trusted_proxies": ["127.0.0.1"]} | overrides
    settings = make_settings(fresh_sqlite_url(template, directory), directory, **values)
    app = create_app(settings, clock=FakeClock())
    async with app.router.lifespan_context(app):
        served = Runtime(app)
        try:
            yield served
        finally:
            await served.close()


async def statuses(client: httpx.AsyncClient, count: int, path: str = f"{API}/stats") -> list[int]:
    return [(await client.get(path)).status_code for _ in range(count)]


def limited(response: httpx.Response) -> bool:
    return any(name in response.headers for name in RATE_HEADERS)


def on_redis(work: Any) -> Any:
    """Run `work(client)` against the test Redis, on a loop of its own (from any test)."""

    async def run() -> Any:
        return await work(coredis.Redis(host="127.0.0.1", port=6379, connect_timeout=2))

    results: list[Any] = []
    errors: list[BaseException] = []

    def thread() -> None:
        try:
            results.append(asyncio.run(run()))
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=thread)
    runner.start()
    runner.join()
    if errors:
        raise errors[0]
    return results[0]


@contextlib.asynccontextmanager
async def membridge(tmp_path: Path, template: Path, **overrides: object) -> AsyncIterator[Runtime]:
    """Membridge on a fresh SQLite database, rate limits on, 127.0.0.1 a trusted proxy."""
    path = tmp_path / f"membridge-{uuid.uuid4().hex[:8]}.db"
    shutil.copyfile(template, path)
    values = {"rate_limit_enabled": True, "trusted_proxies": ["127.0.0.1"]} | overrides
    app = create_membridge_app(membridge_settings(f"sqlite:///{path}", tmp_path, **values))
    async with app.router.lifespan_context(app):
        served = Runtime(app)
        try:
            yield served
        finally:
            await served.close()
