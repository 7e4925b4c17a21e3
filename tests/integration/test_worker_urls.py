"""A worker's agent URL is the runtime's to trust: an admin sets it, or approves the one the
worker proposed with its own key (or Membridge listed); every change is audited. The node is
sent its own key, derived from the fleet's (docs/security.md)."""

from pathlib import Path

import httpx
import pytest

from bloom.domain.fleet import node_agent_key, url_change
from bloom.domain.identity import Role
from bloom.runtime.settings import RuntimeSettings
from tests.support.access import ADMIN_KEY, HEADER, log_in
from tests.support.api import API
from tests.support.databases import make_settings

ADMIN = {HEADER: ADMIN_KEY}
NODE_URL = "http://10.0.0.7:8001"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, api_key=ADMIN_KEY)


async def key_for(
    client: httpx.AsyncClient, role: Role, worker: str | None = None
) -> dict[str, str]:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    made = await credentials.create_key(f"{role} key", role, worker)
    return {HEADER: made.secret}


async def url_audit(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    entries = (
        await client.get(f"{API}/audit", params={"entity_type": "worker"}, headers=ADMIN)
    ).json()
    return [
        (entry["action"], entry["actor"])
        for entry in reversed(entries)
        if entry["action"].startswith("worker_url_")
    ]


async def test_a_worker_key_only_proposes_and_an_admin_approves(client: httpx.AsyncClient) -> None:
    own = await key_for(client, Role.WORKER, "pi-1")
    body = {"name": "pi-1", "url": NODE_URL}
    first = await client.post(f"{API}/workers", json=body, headers=own)
    assert first.status_code == 201
    assert (first.json()["url"], first.json()["pending_url"]) == ("", NODE_URL)
    again = await client.post(f"{API}/workers", json=body, headers=own)  # every 15 s
    assert (again.json()["url"], again.json()["pending_url"]) == ("", NODE_URL)
    assert await url_audit(client) == [("worker_url_proposed", "pi-1")]  # its key's worker
    for refused_key in (own, await key_for(client, Role.VIEWER)):
        refused = await client.post(f"{API}/workers/pi-1/approve-url", json={}, headers=refused_key)
        assert refused.status_code == 403
    stale = await client.post(
        f"{API}/workers/pi-1/approve-url", json={"url": "http://10.0.0.8:8001"}, headers=ADMIN
    )
    assert stale.status_code == 409  # not what the admin was shown
    approved = await client.post(
        f"{API}/workers/pi-1/approve-url", json={"url": NODE_URL}, headers=ADMIN
    )
    assert approved.status_code == 200, approved.text
    assert (approved.json()["url"], approved.json()["pending_url"]) == (NODE_URL, None)
    nothing = await client.post(f"{API}/workers/pi-1/approve-url", headers=ADMIN)
    assert nothing.status_code == 409
    # the node moves: its new address is a proposal again, the approved one stays in use
    moved = await client.post(
        f"{API}/workers", json={"name": "pi-1", "url": "http://10.0.0.9:8001"}, headers=own
    )
    assert (moved.json()["url"], moved.json()["pending_url"]) == (NODE_URL, "http://10.0.0.9:8001")
    # an admin sets one directly
    direct = await client.post(
        f"{API}/workers", json={"name": "pi-1", "url": "http://10.0.0.10:8001"}, headers=ADMIN
    )
    assert direct.json()["url"] == "http://10.0.0.10:8001"
    assert await url_audit(client) == [
        ("worker_url_proposed", "pi-1"),
        ("worker_url_approved", "admin"),
        ("worker_url_proposed", "pi-1"),
        ("worker_url_set", "api"),
    ]
    assert (
        await client.post(f"{API}/workers/nobody/approve-url", headers=ADMIN)
    ).status_code == 404


async def test_the_dashboard_shows_a_proposed_url_and_approves_it(
    client: httpx.AsyncClient,
) -> None:
    own = await key_for(client, Role.WORKER, "pi-2")
    await client.post(f"{API}/workers", json={"name": "pi-2", "url": NODE_URL}, headers=own)
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", "correct horse battery staple", Role.ADMIN)
    browser = await log_in(client, "ada", "correct horse battery staple")
    page = await client.get("/workers", headers=browser)
    assert f"to approve: {NODE_URL}" in page.text
    assert "Approve URL" in page.text
    done = await client.post(
        "/workers/pi-2/approve-url",
        content="url=http%3A%2F%2F10.0.0.7%3A8001",
        headers=browser
        | {"HX-Request": "true", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert done.status_code == 200, done.text
    worker = (await client.get(f"{API}/workers/pi-2", headers=ADMIN)).json()
    assert (worker["url"], worker["pending_url"]) == (NODE_URL, None)


def test_node_keys_are_per_node_and_never_the_fleet_key() -> None:
    keys = {node_agent_key("fleet", name) for name in ("a", "b", "a\0b", "a\0")}
    assert len(keys) == 4
    assert all(key.startswith("bloom_node_") and "fleet" not in key for key in keys)
    assert node_agent_key("fleet", "a") == node_agent_key("fleet", "a")
    assert node_agent_key("fleet", "a") != node_agent_key("other fleet", "a")


@pytest.mark.parametrize(
    ("url", "pending", "proposed", "trusted", "values", "action"),
    [
        ("", None, None, False, {}, None),
        ("", None, "http://x", False, {"pending_url": "http://x"}, "worker_url_proposed"),
        ("http://x", None, "http://x", False, {}, None),
        ("http://x", "http://y", "http://y", False, {}, None),
        ("http://x", None, "http://y", True, {"url": "http://y"}, "worker_url_set"),
        (
            "http://x",
            "http://y",
            "http://y",
            True,
            {"url": "http://y", "pending_url": None},
            "worker_url_set",
        ),
        ("http://x", "http://y", "", False, {"url": "", "pending_url": None}, "worker_url_set"),
    ],
)
def test_url_change(
    url: str,
    pending: str | None,
    proposed: str | None,
    trusted: bool,
    values: dict[str, str | None],
    action: str | None,
) -> None:
    change = url_change(url, pending, proposed, trusted=trusted)
    assert (change.values, change.action) == (values, action)


async def test_a_registration_is_audited_only_when_it_changes_something(
    client: httpx.AsyncClient,
) -> None:
    """Presence (the worker registers again every 15 s) is not an audit event: only a change
    of status, capabilities or version is, saying which."""
    own = await key_for(client, Role.WORKER, "pi-3")
    body: dict[str, object] = {"name": "pi-3", "capabilities": {"max_concurrency": 1}}
    for _ in range(20):
        assert (await client.post(f"{API}/workers", json=body, headers=own)).status_code < 300
    await client.post(f"{API}/workers", json=body | {"agent_version": "2.0"}, headers=own)
    await client.post(f"{API}/workers", json=body | {"capabilities": {"max_concurrency": 2}},
                      headers=own)  # fmt: skip
    await client.post(f"{API}/workers", json={"name": "pi-3", "status": "offline"}, headers=own)
    entries = (
        await client.get(f"{API}/audit", params={"entity_type": "worker"}, headers=ADMIN)
    ).json()
    said = [(entry["action"], entry["detail"]) for entry in reversed(entries)]
    assert [action for action, _ in said] == ["worker_registered"] + ["worker_updated"] * 3
    assert [detail.rsplit("(changed: ", 1)[-1] for _, detail in said[1:]] == [
        "agent_version)",
        "capabilities)",
        "status)",
    ]
