"""Rate-limit settings, storage URLs, the headers of a verdict, and which budgets each server's
policy charges a request."""

from pathlib import Path
from typing import Any

import pytest

from bloom.membridge.settings import MembridgeSettings, load_membridge_settings
from bloom.runtime.settings import RuntimeSettings, load_runtime_settings
from bloom.web.rate_limit import Budget, Verdict, make_storage, shown_url
from bloom.web.settings import SettingsError
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.membridge import membridge_settings


def test_the_defaults_are_the_seeds_budgets_and_a_larger_one_for_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("API", "TEST_CONNECTION", "WORKER", "ANONYMOUS", "ENABLED", "STORAGE"):
        monkeypatch.delenv(f"BLOOM_RATE_LIMIT_{name}", raising=False)
    runtime = RuntimeSettings()
    assert runtime.rate_limit_enabled is True
    assert (runtime.rate_limit_api, runtime.rate_limit_test_connection) == (100, 20)
    assert (runtime.rate_limit_worker, runtime.rate_limit_anonymous) == (3000, 60)
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
    from bloom.domain.identity import Identity, Kind, Role, anonymous, open_access
    from bloom.runtime.rate_limits import runtime_policy

    policy = runtime_policy(make_settings("sqlite://", Path(), rate_limit_enabled=True))
    api, worker, local = ("api", 100), ("worker", 3000), "anonymous:127.0.0.1"
    assert charged(policy, "GET", f"{API}/llm-tasks") == [(*api, local)]
    assert charged(policy, "GET", "/api/membridge/agents") == [(*api, local)]
    for path in (
        f"{API}/health",
        f"{API}/health/",
        "/api/docs",
        "/api/openapi.json",
        "/static/dashboard.css",
    ):
        assert charged(policy, "GET", path) == [], path
    for path in ("/", "/tasks", "/tasks/t1", "/workers", "/projects", "/audit", "/settings"):
        assert charged(policy, "GET", path) == [(*api, local)], path  # the dashboard's pages
    assert charged(policy, "GET", "/login") == [(*api, local)]
    assert charged(policy, "POST", "/tasks/t1/cancel") == [(*api, local)]
    assert charged(policy, "POST", "/projects/p1/clone") == [(*api, local)]
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
    # Without valid credentials: the address's anonymous budget, whatever the path.
    nobody, stranger = state(anonymous("192.0.2.1")), ("anonymous", 60, "anonymous:192.0.2.1")
    for method, path in (("GET", f"{API}/stats"), ("POST", f"{API}/workers"), ("POST", "/login")):
        assert charged(policy, method, path, **nobody) == [stranger], path
    assert charged(policy, "POST", f"{API}/test-connection", **nobody) == [
        stranger,
        ("test-connection", 20, "anonymous:192.0.2.1"),
    ]
    assert charged(policy, "GET", f"{API}/health", **nobody) == []


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
