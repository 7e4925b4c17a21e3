"""People, not ids, in readable records: a logged-in user and a named key are audited and shown
by name (the admin key keeps the seed's actors); an attempt's end is audited as what happened,
with times as times and nothing empty; a task's policy reads as a list."""

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.identity import Role
from bloom.runtime.settings import RuntimeSettings
from tests.support.access import ADMIN_KEY, HEADER, log_in
from tests.support.api import API, failure, success
from tests.support.databases import make_settings

PASSWORD = "correct horse battery staple"
ADMIN = {HEADER: ADMIN_KEY}
HX = {"HX-Request": "true"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, api_key=ADMIN_KEY)


async def entries(client: httpx.AsyncClient, task_id: str) -> list[tuple[str, str, str]]:
    """The task's audit entries, oldest first: (action, actor, detail)."""
    reply = await client.get(f"{API}/audit", params={"task_id": task_id}, headers=ADMIN)
    return [(e["action"], e["actor"], e["detail"]) for e in reversed(reply.json())]


async def failed_attempt(
    client: httpx.AsyncClient, headers: dict[str, str], **task: Any
) -> tuple[str, list[tuple[str, str, str]]]:
    """A task queued by `headers`' caller whose one attempt fails; its audit entries."""
    body = {"context_id": "c", "agent_slug": "default", "prompt": "p"} | task
    task_id = (await client.post(f"{API}/llm-tasks", json=body, headers=headers)).json()["id"]
    await client.post(f"{API}/workers", json={"name": "w1"}, headers=ADMIN)
    grant = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0}, headers=ADMIN)
    lease_id = grant.json()["lease"]["id"]
    done = await client.post(
        f"{API}/llm-tasks/{task_id}/complete",
        json=failure("the model said no", lease_id=lease_id),
        headers=ADMIN,
    )
    assert done.status_code == 200, done.text
    return task_id, await entries(client, task_id)


async def test_a_users_changes_are_audited_and_shown_by_name(client: httpx.AsyncClient) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    alice = await credentials.create_user("alice", PASSWORD, Role.ADMIN)
    browser = await log_in(client, "alice", PASSWORD)
    page = (await client.get("/", headers=browser)).text
    assert ">alice · admin<" in page
    assert alice.id not in page
    made = await client.post(
        "/tasks", content="prompt=hello&context_id=c", headers=browser | HX | FORM
    )
    assert made.status_code == 200, made.text
    task_id = made.headers["hx-redirect"].removeprefix("/tasks/")
    cancelled = await client.post(f"/tasks/{task_id}/cancel", headers=browser | HX)
    assert cancelled.status_code == 200, cancelled.text
    assert [(action, actor) for action, actor, _ in await entries(client, task_id)] == [
        ("task_created", "alice"),
        ("task_cancelled", "alice"),
    ]
    audit_page = (await client.get("/audit", headers=browser)).text
    assert ">alice<" in audit_page


async def test_a_named_keys_changes_carry_its_label_and_the_admin_key_keeps_the_seeds(
    client: httpx.AsyncClient,
) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    bot = {HEADER: (await credentials.create_key("deploy-bot", Role.ADMIN)).secret}
    task_id, _ = await failed_attempt(client, ADMIN, max_attempts=1)
    requeued = await client.post(f"{API}/llm-tasks/{task_id}/requeue", headers=bot)
    assert requeued.status_code == 200, requeued.text
    cancelled = await client.post(f"{API}/llm-tasks/{task_id}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.text
    actors = [(action, actor) for action, actor, _ in await entries(client, task_id)]
    assert actors == [
        ("task_created", "api"),
        ("task_leased", "w1"),
        ("task_dead", "w1"),
        ("task_requeued", "key:deploy-bot"),
        ("task_cancelled", "admin"),
    ]
    me = await client.get(f"{API}/session", headers=bot)
    assert me.json()["authenticated"] is True


async def test_a_failed_attempt_is_audited_as_what_happened(client: httpx.AsyncClient) -> None:
    task_id, audited = await failed_attempt(client, ADMIN, max_attempts=3)
    action, actor, detail = audited[-1]
    assert (action, actor) == ("task_retry_scheduled", "w1")
    assert "task_completed" not in [entry[0] for entry in audited]
    assert re.fullmatch(
        r"Status: error, the model said no, duration: 5ms, "
        r"retry not before \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
        detail,
    ), detail
    page = (await client.get(f"/tasks/{task_id}", headers=ADMIN)).text
    assert "task_retry_scheduled" in page
    assert "None" not in detail
    assert not re.search(r"\d{13}", detail)


async def test_a_success_is_audited_as_completed(client: httpx.AsyncClient) -> None:
    body = {"context_id": "c", "agent_slug": "default", "prompt": "p"}
    task_id = (await client.post(f"{API}/llm-tasks", json=body, headers=ADMIN)).json()["id"]
    await client.post(f"{API}/workers", json={"name": "w1"}, headers=ADMIN)
    grant = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0}, headers=ADMIN)
    done = await client.post(
        f"{API}/llm-tasks/{task_id}/complete",
        json=success("hi", lease_id=grant.json()["lease"]["id"]),
        headers=ADMIN,
    )
    assert done.status_code == 200, done.text
    detail = f"Status: success, artifact: {done.json()['artifact']['id']}, duration: 5ms"
    assert (await entries(client, task_id))[-1] == ("task_completed", "w1", detail)


async def test_the_task_page_shows_the_policy_as_a_list(client: httpx.AsyncClient) -> None:
    body = {
        "context_id": "c",
        "agent_slug": "default",
        "prompt": "p",
        "policy": {"timeout_sec": 90, "budget": 0.0},
    }
    task_id = (await client.post(f"{API}/llm-tasks", json=body, headers=ADMIN)).json()["id"]
    page = (await client.get(f"/tasks/{task_id}", headers=ADMIN)).text
    policy = re.search(r'<dl class="facts" id="task-policy">(.*?)</dl>', page)
    assert policy is not None
    assert policy[1] == "<dt>budget</dt><dd>0</dd><dt>timeout</dt><dd>1 min 30 s</dd>"
