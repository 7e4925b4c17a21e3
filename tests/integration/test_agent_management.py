"""A node's agent managed through the runtime (a stand-in over real HTTP): health refreshes the
worker, update, restart and uninstall are audited, an agent's `ok: false` is a failure (502), not
the reference's success, and a worker without an agent URL or an unknown one is refused."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom.domain.fleet import node_agent_key
from bloom.runtime.settings import RuntimeSettings
from tests.support.agent import Answer, StandInAgent
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.net import closed_port

AGENT_KEY = "agent-key-0123456789"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, agent_key=AGENT_KEY)


@pytest.fixture
def agent() -> Iterator[StandInAgent]:
    served = StandInAgent()
    served.start()
    yield served
    served.stop()


async def node(client: httpx.AsyncClient, name: str, url: str) -> dict[str, object]:
    body = {"name": name, "url": url, "status": "unknown", "capabilities": {"max_concurrency": 2}}
    reply = await client.post(f"{API}/workers", json=body)
    assert reply.status_code == 201
    return dict(reply.json())


async def worker(client: httpx.AsyncClient, name: str) -> dict[str, object]:
    return dict((await client.get(f"{API}/workers/{name}")).json())


async def actions(client: httpx.AsyncClient) -> list[str]:
    entries = (await client.get(f"{API}/audit", params={"limit": 100})).json()
    return [e["action"] for e in reversed(entries) if e["action"].startswith("agent_")]


async def test_health_refreshes_the_worker_and_an_unreachable_agent_is_offline(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(client, "n1", agent.url)
    agent.answers["/health"] = Answer(
        body={
            "status": "ok",
            "version": "0.4.0",
            "hostname": "pi-kitchen",
            "capabilities": {"self_update": True, "max_concurrency": "lots", "claude_cli": False},
        }
    )
    healthy = await client.get(f"{API}/workers/n1/agent-health")
    assert healthy.status_code == 200
    assert healthy.json() | {"capabilities": None} == {
        "reachable": True, "status": "ok", "version": "0.4.0", "hostname": "pi-kitchen",
        "capabilities": None,
    }  # fmt: skip
    refreshed = await worker(client, "n1")
    assert (refreshed["status"], refreshed["agent_version"], refreshed["os_info"]) == (
        "online",
        "0.4.0",
        "pi-kitchen",
    )
    caps = refreshed["capabilities"]
    assert isinstance(caps, dict)
    assert (caps["self_update"], caps["max_concurrency"], caps["claude_cli"]) == (True, 2, False)
    [(path, headers, _)] = agent.other_calls
    assert path == "/health"
    assert "x-membridge-agent" not in headers

    await node(client, "gone", f"http://127.0.0.1:{closed_port()}")
    down = await client.get(f"{API}/workers/gone/agent-health")
    assert down.status_code == 200
    assert down.json()["reachable"] is False
    assert "ConnectError" in down.json()["error"]
    assert (await worker(client, "gone"))["status"] == "offline"


async def test_update_restart_and_uninstall_are_audited(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(client, "n1", agent.url)
    agent.answers["/self-update"] = Answer(body={"ok": True, "version": "0.5.0"})
    updated = await client.post(f"{API}/workers/n1/agent-update", json={"repo_url": "https://x/y"})
    assert updated.json() == {"status": "updated", "ok": True, "version": "0.5.0"}
    assert (await worker(client, "n1"))["agent_version"] == "0.5.0"
    restarted = await client.post(f"{API}/workers/n1/agent-restart")
    assert restarted.json() == {"status": "restarted", "ok": True}
    removed = await client.post(f"{API}/workers/n1/agent-uninstall")
    assert removed.json() == {"status": "uninstalled", "ok": True}
    gone = await worker(client, "n1")
    assert (gone["status"], gone["agent_version"]) == ("offline", "uninstalled")
    assert await actions(client) == ["agent_updated", "agent_restarted", "agent_uninstalled"]
    sent = [(path, headers["x-membridge-agent"], body) for path, headers, body in agent.other_calls]
    own_key = node_agent_key(AGENT_KEY, "n1")  # the node's own, never the fleet's key
    assert sent == [
        ("/self-update", own_key, {"repo_url": "https://x/y"}),
        ("/restart", own_key, None),
        ("/uninstall", own_key, None),
    ]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(200, {"ok": False, "error": "git pull failed"}), "reported a failure: git pull"),
        (Answer(403, {"detail": "Process control is disabled."}), "returned 403: Process control"),
    ],
    ids=["ok-false", "refused"],
)
async def test_an_agent_that_fails_is_a_failure(
    client: httpx.AsyncClient, agent: StandInAgent, answer: Answer, said: str
) -> None:
    await node(client, "n1", agent.url)
    agent.answers["/restart"] = answer
    failed = await client.post(f"{API}/workers/n1/agent-restart")
    assert failed.status_code == 502
    assert said in failed.json()["error"]
    assert await actions(client) == []


async def test_unknown_workers_and_workers_without_an_agent_are_refused(
    client: httpx.AsyncClient,
) -> None:
    missing = await client.get(f"{API}/workers/nobody/agent-health")
    assert (missing.status_code, missing.json()) == (404, {"error": "Worker not found"})
    await client.post(f"{API}/workers", json={"name": "puller"})
    for path in ("agent-restart", "agent-update", "agent-uninstall"):
        reply = await client.post(f"{API}/workers/puller/{path}")
        assert (reply.status_code, reply.json()) == (400, {"error": "Worker has no URL configured"})


async def test_the_dashboard_manages_an_agent(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    hx = {"HX-Request": "true"}
    await node(client, "n1", agent.url)
    agent.answers["/health"] = Answer(body={"version": "0.4.0", "hostname": "pi"})
    page = await client.get("/workers")
    assert 'hx-post="/workers/n1/agent/uninstall"' in page.text
    health = await client.post("/workers/n1/agent/health", headers=hx)
    assert "agent 0.4.0 on pi, healthy" in health.text
    restarted = await client.post("/workers/n1/agent/restart", headers=hx)
    assert restarted.status_code == 200
    agent.answers["/uninstall"] = Answer(403, {"detail": "Process control is disabled."})
    refused = await client.post("/workers/n1/agent/uninstall", headers=hx)
    assert refused.status_code == 502
    assert (await client.post("/workers/n1/agent/explode", headers=hx)).status_code == 404
