"""Push dispatch to a node's agent (a stand-in over real HTTP): the lease first, the callback
address from configuration, an agent that cannot be reached or refuses gives the task back at
once without counting the attempt, one that takes the task keeps its lease alive while its call
is open, and one that goes away leaves a lost lease (retried)."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom.domain.fleet import node_agent_key
from bloom.runtime.settings import RuntimeSettings
from tests.support.agent import Answer, StandInAgent
from tests.support.api import API, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.net import closed_port

PUBLIC_URL = "https://runtime.example.org"
AGENT_KEY = "agent-key-0123456789"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(
        database_url,
        tmp_path,
        public_url=PUBLIC_URL,
        agent_key=AGENT_KEY,
        dispatch_accept_sec=1.5,  # an answer "at once" comes within it even on a loaded machine
    )


@pytest.fixture
def agent() -> Iterator[StandInAgent]:
    served = StandInAgent()
    served.start()
    yield served
    served.stop()


async def node(client: httpx.AsyncClient, name: str, url: str = "", slots: int = 1) -> None:
    body: dict[str, object] = {"name": name, "capabilities": {"max_concurrency": slots}}
    if url:
        body["url"] = url
    assert (await client.post(f"{API}/workers", json=body)).status_code == 201


async def queued(client: httpx.AsyncClient, **fields: object) -> str:
    task = {"context_id": "c", "agent_slug": "default", "prompt": "p"} | fields
    reply = await client.post(f"{API}/llm-tasks", json=task)
    return str(reply.json()["id"])


async def task_of(client: httpx.AsyncClient, task_id: str) -> dict[str, object]:
    reply = await client.get(f"{API}/llm-tasks/{task_id}")
    return dict(reply.json())


async def audit_of(client: httpx.AsyncClient, task_id: str) -> list[str]:
    entries = (await client.get(f"{API}/audit", params={"task_id": task_id})).json()
    return [entry["action"] for entry in reversed(entries)]


async def test_an_agent_that_answers_at_once_gets_the_task_with_our_callback_address(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(client, "n1", agent.url)
    task_id = await queued(client, prompt="hello", context_hints=["h"])
    agent.answer = Answer(body={"ok": True, "accepted": True})
    reply = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={})
    assert reply.status_code == 200, reply.text
    sent = reply.json()
    assert (sent["dispatched"], sent["task_id"], sent["worker_id"]) == (True, task_id, "n1")
    assert sent["execution"] == {"ok": True, "accepted": True}
    [(headers, body)] = agent.calls
    # the node's own key, derived from the fleet's, which is never sent
    assert headers["x-membridge-agent"] == node_agent_key(AGENT_KEY, "n1")
    assert AGENT_KEY not in headers["x-membridge-agent"]
    assert "grant" not in body  # a BLOOM worker fetches the lease by its id
    assert body["runtime_url"] == PUBLIC_URL  # configured, not the caller's Host
    assert (body["task_id"], body["prompt"], body["context_hints"]) == (task_id, "hello", ["h"])
    assert body["lease_id"] == sent["lease_id"]
    task = await task_of(client, task_id)
    assert (task["status"], task["lease_id"], task["attempts"]) == ("leased", sent["lease_id"], 1)
    # delivered already: the worker's own claim does not get it a second time
    claim = await client.post(f"{API}/workers/n1/claim", json={"wait_seconds": 0})
    assert claim.status_code == 204
    # the agent reports as a pull worker would, through the fenced callbacks
    done = await client.post(
        f"{API}/llm-tasks/{task_id}/complete", json=success("hi", lease_id=sent["lease_id"])
    )
    assert done.status_code == 200
    assert "task_dispatched" in await audit_of(client, task_id)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (None, "ConnectError"),
        (Answer(503, {"detail": "Claude CLI is not installed on this node"}), "not installed"),
        (Answer(401, {"detail": "Unauthorized"}), "401"),
    ],
    ids=["unreachable", "no-cli", "wrong-key"],
)
async def test_an_agent_that_cannot_take_the_task_gives_it_back_at_once(
    client: httpx.AsyncClient, agent: StandInAgent, answer: Answer | None, said: str
) -> None:
    url = agent.url if answer else f"http://127.0.0.1:{closed_port()}"
    if answer:
        agent.answer = answer
    await node(client, "n1", url)
    task_id = await queued(client)
    reply = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={"worker_id": "n1"})
    assert reply.status_code == 502
    failed = reply.json()
    assert (failed["dispatched"], failed["task_id"], failed["worker_id"]) == (False, task_id, "n1")
    assert said in failed["error"]
    task = await task_of(client, task_id)
    assert (task["status"], task["lease_id"], task["attempts"]) == ("queued", None, 0)
    leases = (await client.get(f"{API}/leases")).json()
    assert [lease["status"] for lease in leases] == ["released"]
    assert (await audit_of(client, task_id))[-1] == "dispatch_failed"


async def test_workers_without_an_agent_url_are_not_dispatched_to(
    client: httpx.AsyncClient,
) -> None:
    await node(client, "puller")
    task_id = await queued(client)
    named = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={"worker_id": "puller"})
    assert named.status_code == 400
    assert named.json() == {"error": 'Worker "puller" has no URL configured'}
    picked = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={})
    assert picked.status_code == 503
    assert (await task_of(client, task_id))["status"] == "queued"


async def test_an_agent_working_past_the_accept_window_keeps_the_lease_alive(
    client: httpx.AsyncClient, agent: StandInAgent, clock: FakeClock
) -> None:
    """The reference agent answers when the CLI is done and heartbeats once: while its call is
    open the runtime renews the lease; the agent's complete ends it."""
    await node(client, "n1", agent.url)
    task_id = await queued(client)
    agent.answer = Answer(body={"ok": True}, hold_sec=4.0)
    reply = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={"ttl_seconds": 5})
    assert reply.status_code == 200
    assert reply.json()["execution"] is None  # still working
    lease_id = reply.json()["lease_id"]
    first = (await client.get(f"{API}/leases")).json()[0]["expires_at"]
    clock.advance(4)
    await asyncio.sleep(2.2)  # a renewal every ttl/3 s of real time
    renewed = (await client.get(f"{API}/leases")).json()[0]
    assert renewed["status"] == "active"
    assert renewed["expires_at"] > first
    # as the reference agent does: complete without naming the lease (the current one)
    done = await client.post(f"{API}/llm-tasks/{task_id}/complete", json=success("answer"))
    assert done.status_code == 200, done.text
    await asyncio.sleep(2.5)  # the agent answers; nothing is left to end
    task = await task_of(client, task_id)
    assert (task["status"], task["lease_id"]) == ("completed", lease_id)


async def test_an_agent_that_fails_after_taking_the_task_leaves_a_lost_lease(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(client, "n1", agent.url)
    task_id = await queued(client, max_attempts=3)
    agent.answer = Answer(500, {"detail": "Execution failed: boom"}, hold_sec=3.0)
    reply = await client.post(f"{API}/llm-tasks/{task_id}/dispatch", json={})
    assert reply.status_code == 200
    for _ in range(80):
        await asyncio.sleep(0.1)
        if (await task_of(client, task_id))["status"] == "queued":
            break
    task = await task_of(client, task_id)
    assert (task["status"], task["attempts"]) == ("queued", 1)  # this attempt counted
    assert [lease["status"] for lease in (await client.get(f"{API}/leases")).json()] == ["failed"]
    assert (await audit_of(client, task_id))[-1] == "task_requeued"


async def test_the_dashboard_dispatches_and_creates_and_dispatches(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    hx = {"HX-Request": "true"}
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    pulled = await queued(client)
    assert "/dispatch" not in (await client.get("/tasks")).text  # no node has an agent URL yet
    await node(client, "n1", agent.url, slots=2)
    agent.answer = Answer(body={"ok": True, "accepted": True})
    page = await client.get("/tasks")
    assert f'hx-post="/tasks/{pulled}/dispatch"' in page.text
    assert 'name="dispatch"' in page.text
    sent = await client.post(f"/tasks/{pulled}/dispatch", headers=hx)
    assert sent.status_code == 200, sent.text
    assert "dispatched to n1" in sent.text
    made = await client.post(
        "/tasks", content="prompt=go&context_id=c2&dispatch=on", headers=hx | form
    )
    task_id = made.headers["hx-redirect"].removeprefix("/tasks/")
    assert (await task_of(client, task_id))["status"] == "leased"
    assert [body["task_id"] for _, body in agent.calls] == [pulled, task_id]
