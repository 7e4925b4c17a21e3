"""Rate limits in the apps, in-process: the 101st request in a minute refused while heartbeats go
on, test-connection's own budget, identities behind proxies, Membridge's admin key apart."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import API, claim, create_task, register_worker
from tests.support.rate_limits import TOO_MANY, limited, membridge, runtime, statuses


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
