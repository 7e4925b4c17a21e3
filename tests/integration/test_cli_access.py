"""`bloom key …` and `bloom user …` as an operator runs them: on the runtime's database, no
server needed; what they make is then what the runtime accepts (a key as its role, a user at the
login form), and what they revoke or change it refuses."""

import asyncio
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Protocol

import httpx
import pytest
from typer.testing import CliRunner, Result

from bloom.cli.main import app
from bloom.runtime import auth
from bloom.runtime.settings import RuntimeSettings
from tests.support.access import ADMIN_KEY, HEADER, log_in
from tests.support.databases import make_settings

API = "/api/runtime"
PASSWORD = "a long enough password"


class Bloom(Protocol):
    def __call__(self, *args: str, stdin: str | None = None) -> Awaitable[Result]: ...


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, api_key=ADMIN_KEY)


@pytest.fixture
def bloom(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bloom:
    """`bloom …` in-process, on the same database as the app under test (in a thread: the
    commands run their own event loop)."""
    monkeypatch.setattr(auth, "KEY_CACHE_SEC", 0.0)
    env = {"DATABASE_URL": database_url, "BLOOM_DATA_DIR": str(tmp_path), "RUNTIME_API_KEY": None}

    async def run(*args: str, stdin: str | None = None) -> Result:
        runner = CliRunner()
        return await asyncio.to_thread(runner.invoke, app, list(args), input=stdin, env=env)

    return run


async def test_keys_are_shown_once_listed_by_prefix_and_revoked(
    bloom: Bloom, client: httpx.AsyncClient
) -> None:
    made = await bloom("key", "create", "--role", "viewer", "--name", "dashboard")
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip()
    assert "it is not shown again" in made.stderr
    assert (await client.get(f"{API}/stats", headers={HEADER: secret})).status_code == 200
    refused = await client.post(
        f"{API}/llm-tasks",
        json={"context_id": "c", "agent_slug": "a", "prompt": "p"},
        headers={HEADER: secret},
    )
    assert refused.status_code == 403

    listed = await bloom("key", "list")
    assert listed.exit_code == 0
    [line] = listed.stdout.splitlines()
    assert secret not in line
    prefix = secret[:14]
    assert f"{prefix}…" in line
    assert "viewer" in line
    assert "active" in line
    assert "dashboard" in line

    revoked = await bloom("key", "revoke", prefix)
    assert revoked.exit_code == 0, revoked.output
    assert "revoked viewer key" in revoked.stdout
    assert (await client.get(f"{API}/stats", headers={HEADER: secret})).status_code == 401
    assert "revoked" in (await bloom("key", "list")).stdout


async def test_a_worker_key_names_its_worker(bloom: Bloom, client: httpx.AsyncClient) -> None:
    missing = await bloom("key", "create", "--role", "worker")
    assert missing.exit_code == 1
    assert "worker" in missing.stderr
    assert missing.stdout == ""

    made = await bloom("key", "create", "--role", "worker", "--worker", "pi-1")
    assert made.exit_code == 0, made.output
    headers = {HEADER: made.stdout.strip()}
    own = await client.post(f"{API}/workers", json={"name": "pi-1"}, headers=headers)
    assert own.status_code in (200, 201), own.text
    other = await client.post(f"{API}/workers", json={"name": "pi-2"}, headers=headers)
    assert other.status_code == 403


async def test_users_log_in_with_their_role_and_a_new_password_ends_old_sessions(
    bloom: Bloom, client: httpx.AsyncClient
) -> None:
    made = await bloom(
        "user", "create", "ada", "--role", "admin", "--password-stdin", stdin=PASSWORD
    )
    assert made.exit_code == 0, made.output
    assert "ada (admin)" in made.stdout
    browser = await log_in(client, "ada", PASSWORD)
    task = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
    assert (await client.post(f"{API}/llm-tasks", json=task, headers=browser)).status_code == 201

    listed = await bloom("user", "list")
    assert re.search(r"^ada\s+admin\s+made ", listed.stdout, re.M)

    changed = await bloom(
        "user", "password", "ada", "--role", "viewer", "--password-stdin", stdin=PASSWORD + "!"
    )
    assert changed.exit_code == 0, changed.output
    assert (await client.get(f"{API}/stats", headers=browser)).status_code == 401
    again = await log_in(client, "ada", PASSWORD + "!")
    assert (await client.post(f"{API}/llm-tasks", json=task, headers=again)).status_code == 403


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["user", "create", "bob", "--role", "worker", "--password-stdin"], PASSWORD, "keys"),
        (["user", "create", "bob", "--password-stdin"], "short", "at least 10"),
        (["user", "password", "nobody", "--password-stdin"], PASSWORD, "nobody"),
        (["key", "revoke", "bloom_nothing"], None, "bloom_nothing"),
    ],
)
async def test_refusals_are_one_line_and_exit_1(
    bloom: Bloom, args: list[str], stdin: str | None, message: str
) -> None:
    result = await bloom(*args, stdin=stdin)
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("bloom: ")
    assert message in line
    assert "Traceback" not in result.output
