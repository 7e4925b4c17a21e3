"""Login throttling in the app, in-process: failed logins lock out the user name (known or not)
and the client address with 429 and Retry-After, and are audited; password checks run off the
event loop, a few at a time; callers without valid credentials are cut off by their address's
budget before their body is read."""

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx

from bloom.domain.identity import Role
from bloom.runtime.services.credentials import CredentialService
from tests.support.access import ADMIN_KEY, submit_login
from tests.support.api import API
from tests.support.rate_limits import TOO_MANY, Runtime, runtime

PASSWORD = "correct horse battery staple"
WRONG = "not the password at all"
LOCKED_OUT = "Too many failed logins"


def credentials(rt: Runtime) -> CredentialService:
    service: CredentialService = rt.app.state.container.credentials
    return service


async def attempt(client: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    return (await submit_login(client, username, password))[1]


async def lockouts(rt: Runtime) -> list[dict[str, Any]]:
    reply = await rt.caller().get(f"{API}/audit", headers={"X-Runtime-API-Key": ADMIN_KEY})
    entries: list[dict[str, Any]] = reply.json()
    return [e for e in entries if e["action"] == "login_locked_out"]


async def eventually(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), 10)


async def test_failed_logins_lock_out_the_name_from_everywhere_with_429_and_an_audit_entry(
    tmp_path: Path, sqlite_template: Path
) -> None:
    options = {"api_key": ADMIN_KEY, "rate_limit_enabled": False, "login_lockout_sec": 60}
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await credentials(rt).create_user("ada", PASSWORD, Role.ADMIN)
        await credentials(rt).create_user("bob", PASSWORD, Role.VIEWER)
        here, there = rt.caller("198.51.100.1"), rt.caller("203.0.113.7")
        for _ in range(5):
            failed = await attempt(here, "ada", WRONG)
            assert failed.status_code == 401
            assert "Wrong user or password." in failed.text
        for caller in (here, there):  # even the right password, from another address
            refused = await attempt(caller, "ada", PASSWORD)
            assert refused.status_code == 429
            assert 50 <= int(refused.headers["retry-after"]) <= 60
            assert LOCKED_OUT in refused.text
            assert "bloom_session" not in refused.cookies
        assert (await attempt(there, "bob", PASSWORD)).status_code == 303
        [entry] = await lockouts(rt)
        assert (entry["entity_type"], entry["entity_id"]) == ("username", "ada")
        assert entry["actor"] == "198.51.100.1"
        assert entry["detail"] == "5 failed logins: locked out for 60 s"


async def test_an_unknown_name_fails_and_locks_out_exactly_as_a_known_one(
    tmp_path: Path, sqlite_template: Path
) -> None:
    options = {"api_key": ADMIN_KEY, "rate_limit_enabled": False, "login_lockout_sec": 60}
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await credentials(rt).create_user("ada", PASSWORD, Role.ADMIN)
        known, unknown = rt.caller("198.51.100.1"), rt.caller("198.51.100.2")
        for _ in range(5):
            pair = [await attempt(known, "ada", WRONG), await attempt(unknown, "ghost", WRONG)]
            assert [r.status_code for r in pair] == [401, 401]
            assert pair[0].text.split("csrf_token")[0] == pair[1].text.split("csrf_token")[0]
        pair = [await attempt(known, "ada", WRONG), await attempt(unknown, "ghost", WRONG)]
        assert [r.status_code for r in pair] == [429, 429]
        assert {(e["entity_type"], e["entity_id"]) for e in await lockouts(rt)} == {
            ("username", "ada"),
            ("username", "ghost"),
        }


async def test_failures_from_one_address_lock_out_the_address_whatever_the_names(
    tmp_path: Path, sqlite_template: Path
) -> None:
    options = {
        "api_key": ADMIN_KEY,
        "rate_limit_enabled": False,
        "login_lockout_sec": 60,
        "login_max_failures_per_address": 3,
    }
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await credentials(rt).create_user("ada", PASSWORD, Role.ADMIN)
        spray, elsewhere = rt.caller("198.51.100.1"), rt.caller("203.0.113.7")
        got = [(await attempt(spray, f"user{n}", WRONG)).status_code for n in range(4)]
        assert got == [401, 401, 401, 429]
        assert (await attempt(spray, "ada", PASSWORD)).status_code == 429
        assert (await attempt(elsewhere, "ada", PASSWORD)).status_code == 303
        [entry] = await lockouts(rt)
        assert (entry["entity_type"], entry["entity_id"]) == ("client_address", "198.51.100.1")


async def test_a_success_forgets_the_names_failures(tmp_path: Path, sqlite_template: Path) -> None:
    options = {"api_key": ADMIN_KEY, "rate_limit_enabled": False, "login_max_failures": 2}
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await credentials(rt).create_user("ada", PASSWORD, Role.ADMIN)
        caller = rt.caller("198.51.100.1")
        for _ in range(3):
            assert (await attempt(caller, "ada", WRONG)).status_code == 401
            assert (await attempt(caller, "ada", PASSWORD)).status_code == 303
        assert await lockouts(rt) == []


async def test_health_answers_while_every_password_thread_is_busy_and_logins_wait_their_turn(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """The password threads are taken by work that blocks until released: logins (of a known
    and of an unknown name) queue for them, and health answers meanwhile. Were the check run on
    the event loop, the logins would not wait; were the threads unbounded, they would not
    either."""
    options = {"api_key": ADMIN_KEY, "rate_limit_enabled": False, "password_hash_threads": 2}
    async with runtime(tmp_path, sqlite_template, **options) as rt:
        await credentials(rt).create_user("ada", PASSWORD, Role.ADMIN)
        pool = credentials(rt).hasher.limiter
        release = threading.Event()
        async with anyio.create_task_group() as group:
            try:
                for _ in range(2):
                    group.start_soon(lambda: anyio.to_thread.run_sync(release.wait, limiter=pool))
                await eventually(lambda: pool.borrowed_tokens == 2)
                logins = [
                    asyncio.create_task(attempt(rt.caller("198.51.100.1"), "ada", WRONG)),
                    asyncio.create_task(attempt(rt.caller("198.51.100.2"), "ghost", WRONG)),
                ]
                await eventually(lambda: pool.statistics().tasks_waiting == 2)
                health = await rt.caller().get(f"{API}/health")
                assert health.status_code == 200
                assert not any(login.done() for login in logins)
            finally:
                release.set()
        assert [(await login).status_code for login in logins] == [401, 401]
        assert pool.total_tokens == 2


async def refused_unread(
    client: httpx.AsyncClient, path: str, body_read: Callable[[], Awaitable[None]]
) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        await body_read()
        yield b'{"name": "w1"}'

    return await client.post(path, content=body(), headers={"Content-Type": "application/json"})


async def test_callers_without_valid_credentials_are_cut_off_per_address_before_the_body(
    tmp_path: Path, sqlite_template: Path
) -> None:
    read: list[str] = []

    async def note() -> None:
        read.append("body")

    async with runtime(tmp_path, sqlite_template, api_key=ADMIN_KEY, rate_limit_anonymous=5) as rt:
        nobody, wrong_key = rt.caller("198.51.100.1"), rt.caller("198.51.100.1")
        wrong_key.headers["X-Runtime-API-Key"] = "not-the-key"
        got = [(await nobody.post(f"{API}/workers", json={"name": "w1"})).status_code]
        got += [(await wrong_key.post(f"{API}/workers", json={"name": "w1"})).status_code]
        got += [(await nobody.get(f"{API}/stats")).status_code for _ in range(3)]
        assert got == [401] * 5
        read.clear()
        for client in (nobody, wrong_key):
            refused = await refused_unread(client, f"{API}/workers", note)
            assert refused.status_code == 429
            assert refused.json() == TOO_MANY
            assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert read == []  # refused before the body was read
        assert (await nobody.post("/login", content=b"username=a")).status_code == 429
        admin = rt.caller("198.51.100.1")
        admin.headers["X-Runtime-API-Key"] = ADMIN_KEY
        assert (await admin.get(f"{API}/stats")).status_code == 200  # the key holder is apart
        assert (await rt.caller("198.51.100.2").get(f"{API}/stats")).status_code == 401
