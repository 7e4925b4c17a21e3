"""Rate limits and login lockouts on Redis: counters shared between apps, an expiry lost, and an
unreachable Redis failing open with one warning per outage."""

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import coredis
import pytest

from bloom.domain.identity import Role
from bloom.web import rate_limit
from bloom.web.rate_limit import Budget
from tests.support.access import ADMIN_KEY, submit_login
from tests.support.api import API
from tests.support.net import closed_port, free_port
from tests.support.rate_limits import (
    REDIS,
    TOO_MANY,
    limited,
    on_redis,
    runtime,
    statuses,
)


async def test_two_apps_on_one_redis_share_their_counters(
    tmp_path: Path, sqlite_template: Path, redis_prefix: str
) -> None:
    shared = {
        "rate_limit_api": 10,
        "rate_limit_storage": REDIS,
        "rate_limit_key_prefix": redis_prefix,
    }
    async with (
        runtime(tmp_path, sqlite_template, **shared) as one,
        runtime(tmp_path, sqlite_template, **shared) as two,
    ):
        alice_one, alice_two = one.caller("198.51.100.1"), two.caller("198.51.100.1")
        got = [
            (await (alice_one, alice_two)[n % 2].get(f"{API}/stats")).status_code for n in range(12)
        ]
        assert got == [200] * 10 + [429] * 2
        assert await statuses(two.caller("198.51.100.2"), 1) == [200]
        refused = await alice_one.get(f"{API}/stats")
        assert refused.json() == TOO_MANY
        assert 1 <= int(refused.headers["retry-after"]) <= 60


async def test_a_counter_that_lost_its_expiry_is_started_afresh(redis_prefix: str) -> None:
    """limits sends INCRBY and EXPIRE apart; a counter left without its EXPIRE must not block its
    caller for good."""
    limiter = rate_limit.RateLimiter.from_url(REDIS, key_prefix=redis_prefix)
    charge = rate_limit.Charge(Budget("api", 3), "anonymous:198.51.100.1")
    key = f"{redis_prefix}:{charge.budget.item.key_for('api', charge.key)}"

    async def stuck(client: coredis.Redis[bytes]) -> Any:
        return await client.set(key, "7")  # over the budget, and no TTL

    on_redis(stuck)
    refused = await limiter.check([charge])
    assert refused is not None
    assert (refused.allowed, refused.reset_sec) == (False, 0)
    fresh = await limiter.check([charge])
    assert fresh is not None
    assert (fresh.allowed, fresh.remaining) == (True, 2)
    assert 58 <= fresh.reset_sec <= 60


class Recorder:
    """Stands in for the rate limiter's logger."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append(("warning", event))

    def info(self, event: str, **fields: Any) -> None:
        self.events.append(("info", event))


async def test_redis_unreachable_lets_requests_pass_with_one_warning(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(rate_limit, "log", recorder)
    monkeypatch.setattr(rate_limit, "RETRY_SEC", 0.0)  # try the storage on every request
    down = f"redis://127.0.0.1:{closed_port()}/0"
    async with runtime(tmp_path, sqlite_template, rate_limit_api=2, rate_limit_storage=down) as rt:
        alice = rt.caller("198.51.100.1")
        responses = [await alice.get(f"{API}/stats") for _ in range(5)]
    assert [response.status_code for response in responses] == [200] * 5
    assert not any(limited(response) for response in responses)
    assert recorder.events == [("warning", "rate_limit_storage_unavailable")]


class RedisOutage:
    """A TCP relay to the test Redis on a port of its own, which a test can cut and restore."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def restore(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def cut(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in list(self.writers):
            writer.close()
        self.writers.clear()
        await asyncio.sleep(0.05)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", 6379)
        self.writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def test_a_redis_outage_fails_open_once_and_the_limits_come_back_with_it(
    tmp_path: Path, sqlite_template: Path, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(rate_limit, "log", recorder)
    monkeypatch.setattr(rate_limit, "RETRY_SEC", 0.0)
    redis = RedisOutage()
    await redis.restore()
    options = {
        "rate_limit_api": 3,
        "rate_limit_storage": redis.url,
        "rate_limit_key_prefix": redis_prefix,
    }
    try:
        async with runtime(tmp_path, sqlite_template, **options) as rt:
            alice = rt.caller("198.51.100.1")
            assert await statuses(alice, 2) == [200, 200]
            await redis.cut()
            during = [await alice.get(f"{API}/stats") for _ in range(4)]
            assert [response.status_code for response in during] == [200] * 4
            assert not any(limited(response) for response in during)
            await redis.restore()
            back = await alice.get(f"{API}/stats")  # the third of the window Redis kept
            assert back.status_code == 200
            assert back.headers["ratelimit-remaining"] == "0"
            assert await statuses(alice, 1) == [429]
    finally:
        await redis.cut()
    assert recorder.events == [
        ("warning", "rate_limit_storage_unavailable"),
        ("info", "rate_limit_storage_recovered"),
    ]


async def test_two_apps_on_one_redis_share_their_login_lockouts(
    tmp_path: Path, sqlite_template: Path, redis_prefix: str
) -> None:
    shared = {
        "api_key": ADMIN_KEY,
        "rate_limit_enabled": False,
        "login_max_failures": 2,
        "login_lockout_sec": 60,
        "rate_limit_storage": REDIS,
        "rate_limit_key_prefix": redis_prefix,
    }
    async with (
        runtime(tmp_path, sqlite_template, **shared) as one,
        runtime(tmp_path, sqlite_template, **shared) as two,
    ):
        for rt in (one, two):  # two databases: the user exists in each
            await rt.app.state.container.credentials.create_user("ada", "a password!", Role.ADMIN)
        for rt in (one, two):
            failed = await submit_login(rt.caller("198.51.100.1"), "ada", "wrong password")
            assert failed[1].status_code == 401
        for rt in (one, two):
            refused = await submit_login(rt.caller("203.0.113.7"), "ada", "a password!")
            assert refused[1].status_code == 429
            assert 50 <= int(refused[1].headers["retry-after"]) <= 60


async def test_redis_unreachable_lets_logins_pass_without_lockouts(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(rate_limit, "log", recorder)
    down = f"redis://127.0.0.1:{closed_port()}/0"
    options = {"api_key": ADMIN_KEY, "rate_limit_storage": down, "login_max_failures": 1}
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await rt.app.state.container.credentials.create_user("ada", "a password!", Role.ADMIN)
        caller = rt.caller("198.51.100.1")
        failed = [(await submit_login(caller, "ada", "wrong"))[1].status_code for _ in range(3)]
        assert failed == [401] * 3
        assert (await submit_login(caller, "ada", "a password!"))[1].status_code == 303
    assert ("warning", "rate_limit_storage_unavailable") in recorder.events
