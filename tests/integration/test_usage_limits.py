"""A usage limit reported by a complete pauses its worker until the reset, and the router passes
over paused workers without holding their contexts back."""

from typing import Any

import httpx

from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.events import leased_task


async def usage_limited(
    http: httpx.AsyncClient, task_id: str, lease_id: str, retry_at: int
) -> dict[str, Any]:
    body = failure(
        "Claude usage limit reached",
        lease_id=lease_id,
        worker_id="w1",
        error_code="usage_limit",
        retry_at=retry_at,
    )
    response = await http.post(f"{API}/llm-tasks/{task_id}/complete", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def worker_json(http: httpx.AsyncClient, worker: str) -> dict[str, Any]:
    listed = {w["id"]: w for w in (await http.get(f"{API}/workers")).json()}
    detail = (await http.get(f"{API}/workers/{worker}")).json()
    assert detail["paused_until"] == listed[worker]["paused_until"]
    return dict(detail)


async def test_a_usage_limit_pauses_the_worker_until_the_reset(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    assert (await worker_json(client, "w1"))["paused_until"] is None
    reset = clock.now + 3_600_000
    done = await usage_limited(client, task_id, lease_id, reset)
    task = done["task"]
    assert (task["status"], task["not_before"], task["attempts"]) == ("queued", reset, 0)
    assert (await worker_json(client, "w1"))["paused_until"] == reset
    actions = [e["action"] for e in (await client.get(f"{API}/audit")).json()]
    assert "worker_paused" in actions

    other = await create_task(client, context_id="ctx-2")
    assert await claim(client, "w1") is None  # 204, though `other` is claimable
    no_worker = await client.post(f"{API}/llm-tasks/{other['id']}/lease")
    assert no_worker.status_code == 503
    assert no_worker.json() == {"error": "No available worker with free capacity"}
    named = await client.post(f"{API}/llm-tasks/{other['id']}/lease", json={"worker_id": "w1"})
    assert named.status_code == 503
    assert named.json() == {"error": f"Worker 'w1' is paused until {reset}"}

    await register_worker(client, "w1", slots=4)  # re-registering does not lift the pause
    assert (await worker_json(client, "w1"))["paused_until"] == reset
    assert await claim(client, "w1") is None

    clock.advance(3599)
    assert await claim(client, "w1") is None
    clock.advance(1)  # the reset: the pause lapses by itself
    grants = [await claim(client, "w1"), await claim(client, "w1")]
    assert {g["task"]["id"]: g["task"]["attempts"] for g in grants if g} == {
        task_id: 1,
        other["id"]: 1,
    }
    assert (await worker_json(client, "w1"))["paused_until"] == reset  # kept; it has lapsed


async def test_the_router_skips_a_paused_worker(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """The seed's lease picks another worker (even one with fewer free slots); a success by the
    paused worker does not lift its pause."""
    await register_worker(client, "w1", slots=4)
    first = await create_task(client)
    second = await create_task(client)
    grant_a, grant_b = await claim(client, "w1"), await claim(client, "w1")
    assert grant_a is not None
    assert grant_b is not None
    await register_worker(client, "w2", slots=1)
    reset = clock.now + 600_000
    await usage_limited(client, first["id"], grant_a["lease"]["id"], reset)
    done = success(lease_id=grant_b["lease"]["id"])
    assert (
        await client.post(f"{API}/llm-tasks/{second['id']}/complete", json=done)
    ).status_code == 200
    assert (await worker_json(client, "w1"))["paused_until"] == reset

    third = await create_task(client)
    leased = await client.post(f"{API}/llm-tasks/{third['id']}/lease")
    assert leased.status_code == 201
    assert leased.json()["worker"]["id"] == "w2"
    fourth = await create_task(client)
    full = await client.post(f"{API}/llm-tasks/{fourth['id']}/lease")
    assert full.status_code == 503
    clock.advance(601)
    back = await client.post(f"{API}/llm-tasks/{fourth['id']}/lease")
    assert back.status_code == 201
    assert back.json()["worker"]["id"] == "w1"


async def test_a_paused_context_owner_does_not_hold_its_context_back(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """Tasks of a context go to the worker that last held it, for a while; not while it is
    paused: another worker takes them at once."""
    grant = await leased_task(client, context_id="ctx-shared")
    await register_worker(client, "w2", slots=1)
    follow_up = await create_task(client, context_id="ctx-shared")
    assert await claim(client, "w2") is None  # sticky: left to w1, which has a free slot
    await usage_limited(client, grant["task"]["id"], grant["lease"]["id"], clock.now + 600_000)
    taken = await claim(client, "w2")
    assert taken is not None
    assert taken["task"]["id"] == follow_up["id"]


async def test_a_usage_limit_without_a_future_reset_pauses_nothing(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    await usage_limited(client, grant["task"]["id"], grant["lease"]["id"], clock.now - 1)
    assert (await worker_json(client, "w1"))["paused_until"] is None
    other = await leased_task(client)
    body = failure(lease_id=other["lease"]["id"], error_code="rate_limited", retry_at=clock.now + 5)
    await client.post(f"{API}/llm-tasks/{other['task']['id']}/complete", json=body)
    assert (await worker_json(client, "w1"))["paused_until"] is None
