"""Rate limits per identity, and the client address they fall back to.

- `client_address`: X-Forwarded-For only from a trusted proxy, the right-most address that is not
  one, never an exception.
- The runtime in-process (SQLite): the 101st request of a minute is a 429 with the seed's body and
  headers while another identity and the worker protocol go on; test-connection's 21st; the
  X-Forwarded-For rules as the limits see them.
- Redis: two apps in-process and two real server processes share the counters; Redis down (or
  going down and coming back) lets requests pass, with one warning per outage.
- Membridge: the admin key's budget, everyone else's by address, `/health` never limited.

Budgets are small (3-10 a minute) except where the acceptance numbers (100, 20) are the point.
"""

import asyncio
import contextlib
import json
import shutil
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import coredis
import httpx
import pytest
from fastapi import FastAPI

from bloom.membridge.app import create_app as create_membridge_app
from bloom.membridge.settings import MembridgeSettings, load_membridge_settings
from bloom.runtime.app import create_app
from bloom.runtime.settings import RuntimeSettings, load_runtime_settings
from bloom.web import rate_limit
from bloom.web.client_address import client_address, client_scheme, parse_networks
from bloom.web.rate_limit import Budget, Verdict, make_storage, shown_url
from bloom.web.settings import SettingsError
from tests.conftest import fresh_postgres_url, fresh_sqlite_url, make_settings, unavailable
from tests.support.api import API, claim, create_task, register_worker
from tests.support.clock import FakeClock
from tests.support.membridge import MembridgeProcess, membridge_settings
from tests.support.net import closed_port, free_port
from tests.support.postgres import PostgresCluster
from tests.support.server import RuntimeProcess

pytest_plugins = ["tests.membridge_fixtures"]

PROXIES = parse_networks("127.0.0.1, 10.0.0.0/8, ::1")
TOO_MANY = {"error": "Too many requests, please try again later"}
REDIS = "redis://127.0.0.1:6379"
RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy")


def scope(peer: str | None, *forwarded: bytes) -> dict[str, Any]:
    headers = [(b"x-forwarded-for", value) for value in forwarded]
    return {
        "type": "http",
        "client": (peer, 5000) if peer is not None else None,
        "headers": [(b"host", b"runtime"), *headers],
    }


# --- client_address ---------------------------------------------------------------------------


def test_the_peer_is_the_client_without_trusted_proxies() -> None:
    assert client_address(scope("203.0.113.7", b"198.51.100.1"), ()) == "203.0.113.7"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored() -> None:
    assert client_address(scope("203.0.113.7", b"198.51.100.1"), PROXIES) == "203.0.113.7"


def test_from_a_trusted_proxy_the_right_most_untrusted_address_is_the_client() -> None:
    chain = b"1.1.1.1, 198.51.100.1, 10.1.2.3"  # the client's own claim, the client, a proxy
    assert client_address(scope("127.0.0.1", chain), PROXIES) == "198.51.100.1"


def test_several_headers_are_one_chain() -> None:
    got = client_address(scope("127.0.0.1", b"1.1.1.1", b"198.51.100.1, 10.0.0.9"), PROXIES)
    assert got == "198.51.100.1"


def test_a_chain_of_trusted_proxies_only_gives_its_first() -> None:
    assert client_address(scope("127.0.0.1", b"10.0.0.1, 10.0.0.2"), PROXIES) == "10.0.0.1"


def test_a_trusted_peer_without_the_header_is_the_client() -> None:
    assert client_address(scope("127.0.0.1"), PROXIES) == "127.0.0.1"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"", "127.0.0.1"),
        (b"garbage", "127.0.0.1"),
        (b",,,", "127.0.0.1"),
        (b"198.51.100.1, garbage", "127.0.0.1"),  # the walk ends at the first non-address
        (b"garbage, 198.51.100.1", "198.51.100.1"),
        (b"999.1.1.1", "127.0.0.1"),
        (b"198.51.100.1:4711", "198.51.100.1"),
        (b"[2001:db8::1]:4711", "2001:db8::1"),
        (b"2001:DB8:0:0::1", "2001:db8::1"),
        (b"::ffff:198.51.100.1", "198.51.100.1"),
        (b"[", "127.0.0.1"),
        (b"[]:80", "127.0.0.1"),
        (b"unknown", "127.0.0.1"),
        (b"\xff\xfe\x00 \xc3\xa9", "127.0.0.1"),
        (b"1" * 10_000, "127.0.0.1"),
        (b"1.1.1.1, " * 5_000 + b"1.1.1.1", "1.1.1.1"),
        (b"1.1.1.1," * 5_000, "127.0.0.1"),  # ends with an empty entry
        (b"10.0.0.5, garbage", "127.0.0.1"),
        (b"garbage, 10.0.0.5", "10.0.0.5"),  # only proxies reached: the last of them
    ],
)
def test_a_malformed_header_never_raises(header: bytes, expected: str) -> None:
    assert client_address(scope("127.0.0.1", header), PROXIES) == expected


def test_peers_are_given_canonically_and_odd_ones_as_they_are() -> None:
    assert client_address(scope("::ffff:127.0.0.1", b"198.51.100.1"), PROXIES) == "198.51.100.1"
    assert client_address(scope("testclient", b"198.51.100.1"), PROXIES) == "testclient"
    assert client_address(scope(None, b"198.51.100.1"), PROXIES) == "unknown"
    assert client_address({"type": "http"}, PROXIES) == "unknown"


@pytest.mark.parametrize(
    ("peer", "proto", "expected"),
    [
        ("127.0.0.1", b"https", "https"),
        ("127.0.0.1", b"HTTPS, http", "https"),  # the first proxy's word
        ("127.0.0.1", b"http", "http"),
        ("127.0.0.1", b"gopher", "http"),  # not a scheme we serve: the connection's own
        ("127.0.0.1", None, "http"),
        ("203.0.113.7", b"https", "http"),  # an untrusted peer's header is ignored
        (None, b"https", "http"),
    ],
)
def test_the_scheme_is_the_connections_or_a_trusted_proxys(
    peer: str | None, proto: bytes | None, expected: str
) -> None:
    request = scope(peer) | {"scheme": "http"}
    if proto is not None:
        request["headers"].append((b"x-forwarded-proto", proto))
    assert client_scheme(request, PROXIES) == expected
    assert client_scheme(request | {"scheme": "https"}, PROXIES) == (
        "https" if proto is None or peer != "127.0.0.1" or proto == b"gopher" else expected
    )


def test_trusted_proxies_in_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", "10.0.0.0/8, ::1")
    assert load_runtime_settings().trusted_proxies == (ip_network("10.0.0.0/8"), ip_network("::1"))
    monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", '["192.168.1.2", "fd00::/8"]')
    assert load_runtime_settings().trusted_proxies == (
        ip_network("192.168.1.2"),
        ip_network("fd00::/8"),
    )
    monkeypatch.delenv("BLOOM_TRUSTED_PROXIES")
    assert RuntimeSettings().trusted_proxies == ()
    for bad in ("10.0.0.1/8", "proxy.local", "[5]", "[1"):
        monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", bad)
        with pytest.raises(SettingsError, match="BLOOM_TRUSTED_PROXIES"):
            load_runtime_settings()


# --- settings, storage, headers, policies ------------------------------------------------------


def test_the_defaults_are_the_seeds_budgets_and_a_larger_one_for_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("API", "TEST_CONNECTION", "WORKER", "ENABLED", "STORAGE"):
        monkeypatch.delenv(f"BLOOM_RATE_LIMIT_{name}", raising=False)
    runtime = RuntimeSettings()
    assert runtime.rate_limit_enabled is True
    assert (runtime.rate_limit_api, runtime.rate_limit_test_connection) == (100, 20)
    assert runtime.rate_limit_worker == 3000
    assert runtime.rate_limit_storage == "memory://"
    membridge = MembridgeSettings()
    assert membridge.rate_limit_enabled is True
    assert (membridge.rate_limit_admin, membridge.rate_limit_api) == (3000, 100)
    assert membridge.rate_limit_storage == "memory://"


def test_rate_limit_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOOM_RATE_LIMIT_ENABLED", "false")
    monkeypatch.setenv("BLOOM_RATE_LIMIT_API", "7")
    monkeypatch.setenv("BLOOM_RATE_LIMIT_TEST_CONNECTION", "2")
    monkeypatch.setenv("BLOOM_RATE_LIMIT_WORKER", "900")
    monkeypatch.setenv("BLOOM_RATE_LIMIT_STORAGE", "redis://:secret@127.0.0.1:6379/2")
    monkeypatch.setenv("BLOOM_MEMBRIDGE_RATE_LIMIT_ADMIN", "9")
    monkeypatch.setenv("BLOOM_MEMBRIDGE_RATE_LIMIT_API", "4")
    monkeypatch.setenv("BLOOM_MEMBRIDGE_RATE_LIMIT_STORAGE", "async+redis://127.0.0.1:6379/3")
    runtime = load_runtime_settings()
    assert not runtime.rate_limit_enabled
    assert (runtime.rate_limit_api, runtime.rate_limit_test_connection) == (7, 2)
    assert runtime.rate_limit_worker == 900
    assert runtime.rate_limit_storage == "redis://:secret@127.0.0.1:6379/2"
    membridge = load_membridge_settings()
    assert (membridge.rate_limit_admin, membridge.rate_limit_api) == (9, 4)
    assert membridge.rate_limit_storage == "async+redis://127.0.0.1:6379/3"
    for bad in ("127.0.0.1:6379", "mysql://db", "memcached://cache:11211"):
        monkeypatch.setenv("BLOOM_RATE_LIMIT_STORAGE", bad)
        with pytest.raises(SettingsError, match="BLOOM_RATE_LIMIT_STORAGE"):
            load_runtime_settings()
    monkeypatch.setenv("BLOOM_RATE_LIMIT_STORAGE", "memory://")
    monkeypatch.setenv("BLOOM_RATE_LIMIT_API", "0")
    with pytest.raises(SettingsError, match="BLOOM_RATE_LIMIT_API"):
        load_runtime_settings()


def test_storage_urls_and_how_they_are_logged() -> None:
    assert type(make_storage("memory://", key_prefix="p")).__name__ == "MemoryStorage"
    for url in ("redis://127.0.0.1:6379/3", "rediss://cache:6380", "async+redis://127.0.0.1"):
        assert type(make_storage(url, key_prefix="p")).__name__ == "RedisStorage"
    with pytest.raises(ValueError, match="unknown"):
        make_storage("mysql://db", key_prefix="p")
    assert shown_url("redis://:secret@cache.local:6380/2") == "redis://cache.local:6380"
    assert shown_url("rediss://user:secret@cache.local/0") == "rediss://cache.local"
    assert shown_url("memory://") == "memory://"


def test_the_headers_of_a_verdict() -> None:
    passed = Verdict(allowed=True, budget=Budget("api", 100), remaining=7, reset_sec=42)
    assert dict(passed.headers()) == {
        b"ratelimit-policy": b"100;w=60",
        b"ratelimit-limit": b"100",
        b"ratelimit-remaining": b"7",
        b"ratelimit-reset": b"42",
    }
    refused = Verdict(allowed=False, budget=Budget("api", 100), remaining=0, reset_sec=0)
    assert dict(refused.headers())[b"retry-after"] == b"1"


def charged(policy: Any, method: str, path: str, **extra: Any) -> list[tuple[str, int, str]]:
    request = {"type": "http", "method": method, "path": path, "headers": []} | extra
    request.setdefault("client", ("127.0.0.1", 4711))
    return [(c.budget.name, c.budget.per_minute, c.key) for c in policy(request)]


def test_the_runtime_policy() -> None:
    from bloom.domain.identity import Identity, Kind, Role, open_access
    from bloom.runtime.rate_limits import runtime_policy

    policy = runtime_policy(make_settings("sqlite://", Path(), rate_limit_enabled=True))
    api, worker, local = ("api", 100), ("worker", 3000), "anonymous:127.0.0.1"
    assert charged(policy, "GET", f"{API}/llm-tasks") == [(*api, local)]
    assert charged(policy, "GET", "/api/membridge/agents") == [(*api, local)]
    for path in (f"{API}/health", f"{API}/health/", "/", "/api/docs", "/api/openapi.json"):
        assert charged(policy, "GET", path) == [], path
    for path in (
        f"{API}/workers",
        f"{API}/workers/",
        f"{API}/workers/w1/claim",
        f"{API}/llm-tasks/t1/heartbeat",
        f"{API}/llm-tasks/t1/complete",
        f"{API}/llm-tasks/t1/events",
    ):
        assert charged(policy, "POST", path) == [(*worker, local)], path
    for method, path in (
        ("GET", f"{API}/workers"),
        ("DELETE", f"{API}/workers/w1"),
        ("GET", f"{API}/llm-tasks/t1/events"),
        ("POST", f"{API}/llm-tasks/t1/lease"),
        ("POST", f"{API}/llm-tasks/t1/cancel"),
        ("POST", f"{API}/workers/w1/claim/x"),
    ):
        assert charged(policy, method, path) == [(*api, local)], path
    assert charged(policy, "POST", f"{API}/test-connection") == [
        (*api, local),
        ("test-connection", 20, local),
    ]

    def state(identity: Identity) -> dict[str, Any]:
        return {"state": {"identity": identity}}

    a_worker = state(Identity(Kind.KEY, "k1", Role.WORKER, "w1"))
    assert charged(policy, "GET", f"{API}/llm-tasks/t1", **a_worker) == [(*worker, "key:k1")]
    a_viewer = state(Identity(Kind.KEY, "k2", Role.VIEWER))
    assert charged(policy, "GET", f"{API}/stats", **a_viewer) == [(*api, "key:k2")]
    admin = state(Identity(Kind.ADMIN_KEY, "admin", Role.ADMIN))
    assert charged(policy, "GET", f"{API}/stats", **admin) == [(*api, "admin_key:admin")]
    heartbeat = f"{API}/llm-tasks/t1/heartbeat"
    assert charged(policy, "POST", heartbeat, **admin) == [(*worker, "admin_key:admin")]
    open_ = state(open_access("192.0.2.1"))
    assert charged(policy, "GET", f"{API}/stats", **open_) == [(*api, "anonymous:192.0.2.1")]


def test_the_membridge_policy() -> None:
    from bloom.membridge.rate_limits import membridge_policy

    def policy_of(**overrides: Any) -> Any:
        values = {"rate_limit_enabled": True, "trusted_proxies": ["127.0.0.1"]} | overrides
        return membridge_policy(membridge_settings("sqlite://", Path(), **values))

    keyed = policy_of(admin_key="k-123", dev=False)
    good, bad = [(b"x-membridge-admin", b"k-123")], [(b"x-membridge-admin", b"\xff" * 300)]
    forwarded = [(b"x-forwarded-for", b"198.51.100.1")]
    assert charged(keyed, "GET", "/health") == []
    assert charged(keyed, "GET", "/agents", headers=good) == [("admin", 3000, "admin_key:admin")]
    assert charged(keyed, "GET", "/agents", headers=bad) == [("api", 100, "anonymous:127.0.0.1")]
    assert charged(keyed, "POST", "/agents", headers=forwarded) == [
        ("api", 100, "anonymous:198.51.100.1")
    ]
    dev = policy_of()
    assert charged(dev, "GET", "/agents", headers=forwarded) == [
        ("admin", 3000, "anonymous:198.51.100.1")
    ]


# --- the runtime in-process --------------------------------------------------------------------


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


async def test_the_101st_request_in_a_minute_is_refused_while_others_and_heartbeats_go_on(
    tmp_path: Path, sqlite_template: Path
) -> None:
    async with runtime(tmp_path, sqlite_template) as rt:
        setup, alice, bob = rt.caller("203.0.113.9"), rt.caller("198.51.100.1"), rt.caller("::1")
        task = await create_task(setup)
        await register_worker(alice, "w1")
        granted = await claim(alice, "w1")
        assert granted is not None
        beat = {"lease_id": granted["lease"]["id"], "worker_id": "w1"}

        for n in range(1, 101):
            response = await alice.get(f"{API}/stats")
            assert response.status_code == 200, (n, response.text)
            assert response.headers["ratelimit-remaining"] == str(100 - n)
        assert response.headers["ratelimit-limit"] == "100"
        assert response.headers["ratelimit-policy"] == "100;w=60"
        assert 0 < int(response.headers["ratelimit-reset"]) <= 60

        refused = await alice.get(f"{API}/stats")
        assert refused.status_code == 429
        assert refused.json() == TOO_MANY
        assert refused.headers["content-type"] == "application/json"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["ratelimit-remaining"] == "0"
        assert refused.headers["ratelimit-limit"] == "100"
        assert refused.headers["x-request-id"]  # the access log saw it
        # One counter for both mounts, as the seed's apiLimiter.
        assert (await alice.get("/api/membridge/agents")).status_code == 429

        other = await bob.get(f"{API}/stats")
        assert other.status_code == 200
        assert other.headers["ratelimit-remaining"] == "99"

        for _ in range(5):  # the worker protocol from the same address has its own budget
            response = await alice.post(f"{API}/llm-tasks/{task['id']}/heartbeat", json=beat)
            assert response.status_code == 200, response.text
            assert response.headers["ratelimit-limit"] == "3000"
        assert await claim(alice, "w1") is None
        health = await alice.get(f"{API}/health")
        assert health.status_code == 200
        assert not limited(health)
        assert (await alice.get(f"{API}/stats")).status_code == 429


@pytest.fixture
def membridge_stub() -> Iterator[str]:
    """A Membridge that answers its health at once (test-connection's success path)."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ok", "service": "membridge-server"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


async def test_test_connection_refuses_the_21st_and_counts_in_the_api_budget_too(
    tmp_path: Path, sqlite_template: Path, membridge_stub: str
) -> None:
    async with runtime(tmp_path, sqlite_template, membridge_server_url=membridge_stub) as rt:
        alice, bob = rt.caller("198.51.100.1"), rt.caller("198.51.100.2")
        for n in range(1, 21):
            response = await alice.post(f"{API}/test-connection")
            assert response.status_code == 200, response.text
            assert response.json()["connected"] is True
            assert response.headers["ratelimit-policy"] == "20;w=60"  # the tighter budget
            assert response.headers["ratelimit-remaining"] == str(20 - n)
        refused = await alice.post(f"{API}/test-connection")
        assert refused.status_code == 429
        assert refused.json() == TOO_MANY
        assert refused.headers["ratelimit-policy"] == "20;w=60"
        assert (await bob.post(f"{API}/test-connection")).status_code == 200
        other = await alice.get(f"{API}/stats")  # 21 test-connections and this one
        assert other.status_code == 200
        assert other.headers["ratelimit-remaining"] == str(100 - 22)


async def test_x_forwarded_for_from_an_untrusted_peer_is_not_a_new_identity(
    tmp_path: Path, sqlite_template: Path
) -> None:
    async with runtime(tmp_path, sqlite_template, trusted_proxies=[], rate_limit_api=3) as rt:
        callers = [rt.caller(f"198.51.100.{n}") for n in (1, 2, 3, 4)]
        got = [(await caller.get(f"{API}/stats")).status_code for caller in callers]
        assert got == [200, 200, 200, 429]
        assert await statuses(rt.caller("198.51.100.9", peer="192.0.2.1"), 1) == [200]


async def test_a_malformed_x_forwarded_for_counts_the_proxy_and_never_fails(
    tmp_path: Path, sqlite_template: Path
) -> None:
    malformed: list[str | bytes] = ["garbage", "", "999.1.1.1", b"\xff\xfe, \xc3\xa9"]
    async with runtime(tmp_path, sqlite_template, rate_limit_api=len(malformed)) as rt:
        for header in malformed:
            response = await rt.caller(header).get(f"{API}/stats")
            assert response.status_code == 200, (header, response.text)
        assert await statuses(rt.caller(), 1) == [429]  # the proxy's own address: all the same
        assert await statuses(rt.caller("198.51.100.1, garbage"), 1) == [429]
        assert await statuses(rt.caller("198.51.100.1"), 1) == [200]


# --- Redis -------------------------------------------------------------------------------------


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


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own on the test Redis; its keys are deleted afterwards."""

    async def ping(client: coredis.Redis[bytes]) -> Any:
        return await client.ping()

    try:
        on_redis(ping)
    except Exception as exc:
        unavailable(f"Redis does not answer at {REDIS}: {exc}")
    prefix = f"bloom-test-{uuid.uuid4().hex[:12]}"
    yield prefix

    async def clean(client: coredis.Redis[bytes]) -> int:
        keys: list[str | bytes] = [key async for key in client.scan_iter(match=f"{prefix}*")]
        return await client.delete(keys) if keys else 0

    on_redis(clean)


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


@pytest.mark.slow
def test_two_runtime_processes_sharing_redis_refuse_the_101st_request_between_them(
    postgres: PostgresCluster, tmp_path: Path, redis_prefix: str
) -> None:
    database_url = fresh_postgres_url(postgres)
    env = {
        "BLOOM_RATE_LIMIT_ENABLED": "true",
        "BLOOM_RATE_LIMIT_STORAGE": f"{REDIS}/0",
        "BLOOM_RATE_LIMIT_KEY_PREFIX": redis_prefix,
    }
    servers = [RuntimeProcess(database_url, tmp_path / name, **env) for name in ("a", "b")]
    try:
        with ThreadPoolExecutor() as starting:  # side by side: half the wait
            list(starting.map(lambda server: server.start(), servers))
        got: list[int] = []
        with httpx.Client(timeout=10) as http:
            for server in servers:
                got += [http.get(f"{server.url}{API}/stats").status_code for _ in range(60)]
            refused = http.get(f"{servers[0].url}{API}/stats")
        assert got == [200] * 100 + [429] * 20
        assert refused.status_code == 429
        assert refused.json() == TOO_MANY
        assert refused.headers["ratelimit-policy"] == "100;w=60"
    finally:
        for server in servers:
            server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("trusted", [False, True])
def test_real_servers_believe_x_forwarded_for_only_from_trusted_proxies(
    sqlite_template: Path, tmp_path: Path, trusted: bool
) -> None:
    """uvicorn, left to itself, takes X-Forwarded-For from 127.0.0.1 whatever the settings say:
    a caller on this machine could then be a new client at every request."""
    proxies = {"BLOOM_TRUSTED_PROXIES": "127.0.0.1"} if trusted else {}
    runtime = RuntimeProcess(
        fresh_sqlite_url(sqlite_template, tmp_path),
        tmp_path,
        BLOOM_RATE_LIMIT_ENABLED="true",
        BLOOM_RATE_LIMIT_API="3",
        **proxies,
    )
    membridge = MembridgeProcess(
        tmp_path / "membridge",
        BLOOM_MEMBRIDGE_RATE_LIMIT_ENABLED="true",
        BLOOM_MEMBRIDGE_RATE_LIMIT_API="3",
        **proxies,
    )
    try:
        with ThreadPoolExecutor() as starting:
            list(starting.map(lambda server: server.start(), (runtime, membridge)))
        with httpx.Client(timeout=10) as http:
            for url in (f"{runtime.url}{API}/stats", f"{membridge.url}/agents"):
                got = [
                    http.get(url, headers={"X-Forwarded-For": f"198.51.100.{n}"}).status_code
                    for n in range(1, 6)
                ]
                expected = 401 if url.endswith("/agents") else 200
                assert got == ([expected] * 5 if trusted else [expected] * 3 + [429] * 2), url
    finally:
        runtime.stop()
        membridge.stop()


# --- Membridge ---------------------------------------------------------------------------------


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


async def test_membridge_counts_the_admin_key_apart_from_everyone_else(
    tmp_path: Path, membridge_sqlite_template: Path
) -> None:
    options = {"admin_key": "k-123", "dev": False, "rate_limit_api": 3, "rate_limit_admin": 5}
    async with membridge(tmp_path, membridge_sqlite_template, **options) as mb:
        stranger, admin = mb.caller("198.51.100.1"), mb.caller("198.51.100.1")
        wrong_key = {"X-MEMBRIDGE-ADMIN": "wrong"}
        got = [(await stranger.get("/agents", headers=wrong_key)).status_code for _ in range(3)]
        assert got == [401] * 3
        refused = await stranger.get("/agents")
        assert refused.status_code == 429
        assert refused.json() == {"detail": TOO_MANY["error"]}
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert await statuses(mb.caller("198.51.100.2"), 1, "/agents") == [401]

        admin.headers["X-MEMBRIDGE-ADMIN"] = "k-123"
        for n in range(1, 6):  # the key holder is not the address it calls from
            response = await admin.get("/agents")
            assert response.status_code == 200, response.text
            assert response.headers["ratelimit-policy"] == "5;w=60"
            assert response.headers["ratelimit-remaining"] == str(5 - n)
        assert await statuses(admin, 1, "/agents") == [429]

        health = [await stranger.get("/health") for _ in range(10)]
        assert [response.status_code for response in health] == [200] * 10
        assert not any(limited(response) for response in health)


async def test_membridge_in_dev_mode_counts_everyone_as_an_admin_by_address(
    tmp_path: Path, membridge_sqlite_template: Path
) -> None:
    async with membridge(tmp_path, membridge_sqlite_template, rate_limit_admin=3) as mb:
        assert await statuses(mb.caller("198.51.100.1"), 4, "/agents") == [200] * 3 + [429]
        assert await statuses(mb.caller("198.51.100.2"), 1, "/agents") == [200]
