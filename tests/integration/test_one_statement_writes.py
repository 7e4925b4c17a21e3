"""The seed's cycle on PostgreSQL in few statements (issue 31 item 3): a create and a heartbeat in
one statement each, a complete in two, none inside BEGIN/COMMIT; what they write is what the
steps wrote (both databases), and a write whose compare-and-set fails writes nothing."""

from typing import Any

import httpx

from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.sent import Sent


async def trail(client: httpx.AsyncClient, task_id: str) -> list[tuple[str, str, str]]:
    entries = (await client.get(f"{API}/audit", params={"task_id": task_id})).json()
    return [(e["action"], e["actor"], e["detail"]) for e in entries][::-1]


async def test_the_cycle_writes_what_the_steps_wrote(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client, context_id="c1", agent_slug="bench")
    grant = await claim(client, "w1")
    assert grant is not None
    lease_id = grant["lease"]["id"]
    beat = await client.post(f"{API}/llm-tasks/{task['id']}/heartbeat", json={"lease_id": lease_id})
    assert beat.status_code == 200, beat.text
    assert beat.json()["task_status"] == "running"
    again = await client.post(
        f"{API}/llm-tasks/{task['id']}/heartbeat", json={"lease_id": lease_id}
    )
    assert again.json()["task_status"] == "running"
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete", json=success("out") | {"lease_id": lease_id}
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["task"]["status"] == "completed"
    assert body["result"]["worker_id"] == "w1"
    assert body["artifact"]["content"] == "out"
    assert (await client.get(f"{API}/llm-tasks/{task['id']}")).json() == body["task"]
    lease = (await client.get(f"{API}/leases")).json()[0]
    assert (lease["id"], lease["status"]) == (lease_id, "released")
    artifact = body["artifact"]["id"]
    assert await trail(client, task["id"]) == [
        ("task_created", "api", "Task for agent bench, context c1"),
        ("task_leased", "w1", f"Task {task['id']} leased to worker w1, TTL 300s"),
        ("task_running", "w1", f"Worker w1 started lease {lease_id}"),  # one start, not two
        ("task_completed", "w1", f"Status: success, artifact: {artifact}, duration: 5ms"),
    ]
    replay = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete", json=success("out") | {"lease_id": lease_id}
    )
    assert replay.headers.get("idempotent-replayed") == "true"
    assert replay.json() == body


async def test_a_failure_is_recorded_in_one_statement_too(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client, max_attempts=1)
    grant = await claim(client, "w1")
    assert grant is not None
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete",
        json=failure("boom") | {"lease_id": grant["lease"]["id"]},
    )
    assert done.status_code == 200, done.text
    assert done.json()["task"]["status"] == "dead"
    assert done.json()["artifact"] is None
    assert [action for action, _, _ in await trail(client, task["id"])][-1] == "task_dead"


async def test_a_lapsed_lease_writes_nothing(client: httpx.AsyncClient, clock: FakeClock) -> None:
    """The read finds the lease active; the write's compare-and-set finds it expired (the reaper
    has not run): nothing of the end is written, and the refusal is the steps'."""
    await register_worker(client, "w1")
    task = await create_task(client)
    grant = await claim(client, "w1")
    assert grant is not None
    lease_id = grant["lease"]["id"]
    clock.advance(400)  # past the lease, before any reaper pass
    beat = await client.post(f"{API}/llm-tasks/{task['id']}/heartbeat", json={"lease_id": lease_id})
    assert beat.status_code == 409, beat.text
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete", json=success() | {"lease_id": lease_id}
    )
    assert done.status_code == 409, done.text
    assert "expired" in done.json()["error"]
    assert (await client.get(f"{API}/llm-tasks/{task['id']}")).json()["status"] == "leased"
    assert (await client.get(f"{API}/artifacts")).json() == []
    assert [action for action, _, _ in await trail(client, task["id"])] == [
        "task_created",
        "task_leased",
    ]


async def test_round_trips_of_the_cycle(client: httpx.AsyncClient, sent: Sent) -> None:
    postgres = client_kind(client) == "postgresql"
    await register_worker(client, "w1")
    sent.clear()
    task = await create_task(client)
    create = (len(sent.statements), sent.transactions)
    sent.clear()
    grant = await claim(client, "w1")
    assert grant is not None
    claimed = (len(sent.statements), sent.transactions)  # check-in, then claim and grant
    sent.clear()
    await client.post(
        f"{API}/llm-tasks/{task['id']}/heartbeat", json={"lease_id": grant["lease"]["id"]}
    )
    heartbeat = (len(sent.statements), sent.transactions)
    sent.clear()
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete",
        json=success() | {"lease_id": grant["lease"]["id"]},
    )
    assert done.status_code == 200
    complete = (len(sent.statements), sent.transactions)
    if postgres:
        # a create reads its project's tool policy, then writes in one statement
        assert (create, heartbeat, complete) == ((2, 0), (1, 0), (1, 0)), sent.statements
        assert claimed == (2, 1), sent.statements


def client_kind(client: httpx.AsyncClient) -> str:
    app: Any = client.app  # type: ignore[attr-defined]
    return str(app.state.container.db.kind)
