"""Fencing, in-process on the fake clock so a lease can be made to lapse exactly: a superseded,
released or lapsed lease changes nothing, and a repeated complete replays the first outcome."""

from typing import Any

import httpx

from bloom.runtime.services.leasing import Claimed
from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe


def container_of(client: httpx.AsyncClient) -> Any:
    return client.app.state.container  # type: ignore[attr-defined]


async def send(
    client: httpx.AsyncClient, task_id: str, action: str, body: dict[str, Any]
) -> httpx.Response:
    return await client.post(f"{API}/llm-tasks/{task_id}/{action}", json=body)


async def assert_refused_without_change(
    client: httpx.AsyncClient,
    probe: DatabaseProbe,
    task_id: str,
    stale_lease: str,
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    """Each call answers 409 naming the stale lease, and the database is exactly as before."""
    before = probe.snapshot(task_id)
    for action, body in calls:
        response = await send(client, task_id, action, body)
        assert response.status_code == 409, (action, response.text)
        assert stale_lease in response.json()["error"], (action, response.text)
        assert probe.snapshot(task_id) == before, action


async def claim_then_lose_to_another_worker(
    client: httpx.AsyncClient, clock: FakeClock
) -> tuple[str, str, str]:
    """Worker A claims and goes silent; its claim lapses, the reaper requeues the task, and
    worker B claims it. Returns (task id, A's lease, B's lease)."""
    task = await create_task(client)
    await register_worker(client, "A")
    await register_worker(client, "B")
    first = await claim(client, "A")
    assert first is not None
    # Past A's 30 s claim-ack window, and past the 60 s after which a silent worker no longer
    # keeps first call on the tasks of its contexts.
    clock.advance(61)
    assert await container_of(client).reaper.reap_once() == 1
    second = await claim(client, "B")
    assert second is not None
    assert second["task"]["id"] == task["id"]
    assert second["lease"]["id"] != first["lease"]["id"]
    return task["id"], first["lease"]["id"], second["lease"]["id"]


async def test_superseded_lease_cannot_heartbeat_or_complete(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    """After A's lease expired and B holds the task, A's heartbeat and complete naming its old
    lease are refused with 409, a complete naming worker A without a lease (so B's, the task's
    current one) with 403, and none changes anything; B then finishes the task normally."""
    task_id, old, new = await claim_then_lose_to_another_worker(client, clock)
    lease_a = probe.leases_of(task_id)[0]
    assert (lease_a["id"], lease_a["status"]) == (old, "expired")
    await assert_refused_without_change(
        client,
        probe,
        task_id,
        old,
        [
            ("heartbeat", {"lease_id": old}),
            ("heartbeat", {"lease_id": old, "worker_id": "A"}),
            ("complete", success("late", lease_id=old)),
            ("complete", failure("late", lease_id=old)),
            ("complete", success("late", lease_id=old, worker_id="A")),
        ],
    )
    before = probe.snapshot(task_id)
    refused = await send(client, task_id, "complete", success("late", worker_id="A"))
    assert refused.status_code == 403  # B's lease is the task's current one, and it is not A's
    assert probe.snapshot(task_id) == before

    assert (await send(client, task_id, "heartbeat", {"lease_id": new})).status_code == 200
    done = await send(client, task_id, "complete", success("by B", lease_id=new))
    assert done.status_code == 200, done.text
    assert (done.json()["task"]["status"], done.json()["result"]["worker_id"]) == ("completed", "B")
    assert [r["lease_id"] for r in probe.results()] == [new]


async def test_released_lease_cannot_complete_differently_or_heartbeat(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """Once a lease completed the task (and was released), a complete with another status or a
    heartbeat naming it is refused with 409 and changes nothing."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    lease_id = claimed["lease"]["id"]
    done = await send(client, task["id"], "complete", success(lease_id=lease_id))
    assert done.status_code == 200, done.text
    assert probe.leases_of(task["id"])[0]["status"] == "released"
    await assert_refused_without_change(
        client,
        probe,
        task["id"],
        lease_id,
        [
            ("complete", failure(lease_id=lease_id)),
            ("heartbeat", {"lease_id": lease_id}),
        ],
    )


async def test_lapsed_lease_is_not_revived_before_the_reaper_runs(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    """A lease past its expiry that the reaper has not seen yet is dead all the same: heartbeat
    and complete answer 409 and change nothing (expires_at stays put), and the reaper then
    expires it and requeues the task."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    lease_id = claimed["lease"]["id"]
    beat = await send(client, task["id"], "heartbeat", {"lease_id": lease_id})
    assert beat.status_code == 200
    clock.advance(301)  # past the full 300 s TTL the heartbeat granted
    assert probe.leases_of(task["id"])[0]["status"] == "active"  # nobody has reaped it yet
    await assert_refused_without_change(
        client,
        probe,
        task["id"],
        lease_id,
        [
            ("heartbeat", {"lease_id": lease_id}),
            ("heartbeat", {}),
            ("complete", success(lease_id=lease_id)),
            ("complete", success()),
        ],
    )
    assert await container_of(client).reaper.reap_once() == 1
    (lease,) = probe.leases_of(task["id"])
    assert lease["status"] == "expired"
    after = probe.task(task["id"])
    assert (after["status"], after["lease_id"], after["attempts"]) == ("queued", None, 1)
    actions = probe.audit_actions(task["id"])
    assert (actions["lease_expired"], actions["task_requeued"]) == (1, 1)
    assert probe.results() == []


async def test_repeated_complete_replays_the_first_outcome(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """Completing the same lease again with the same status answers 200 with the first outcome
    (same result, same artifact) and Idempotent-Replayed: true, and records nothing new."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    body = success("once", lease_id=claimed["lease"]["id"])
    first = await send(client, task["id"], "complete", body)
    assert first.status_code == 200, first.text
    assert "Idempotent-Replayed" not in first.headers
    before = probe.snapshot(task["id"])
    for repeat in (body, success("twice", lease_id=claimed["lease"]["id"])):
        again = await send(client, task["id"], "complete", repeat)
        assert again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert probe.snapshot(task["id"]) == before
    assert len(probe.results()) == len(probe.artifacts()) == 1


async def test_a_grant_answered_late_is_sent_with_time_to_acknowledge_or_not_at_all(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """An overloaded server may commit a grant and answer with it much later. The answer then
    gives the worker at least half the acknowledgement window again; a grant whose lease has
    lapsed meanwhile (and may be reaped and granted to another) is never sent."""
    leases = container_of(client).leases
    try_claim = leases._try_claim
    delay_sec: list[float] = []

    async def answered_late(*args: Any, **kwargs: Any) -> Any:
        claimed = await try_claim(*args, **kwargs)
        if isinstance(claimed, Claimed) and delay_sec:
            clock.advance(delay_sec.pop())  # the answer waits in a busy event loop
        return claimed

    leases._try_claim = answered_late
    await register_worker(client, "w1", slots=2)
    late = await create_task(client)
    delay_sec.append(25)  # of the 30 s window
    grant = await claim(client, "w1")
    assert grant is not None
    assert grant["task"]["id"] == late["id"]
    assert grant["lease"]["expires_at"] == clock.now + 30_000
    beat = await client.post(
        f"{API}/llm-tasks/{late['id']}/heartbeat", json={"lease_id": grant["lease"]["id"]}
    )
    assert beat.status_code == 200  # still the worker's

    lapsed = await create_task(client)
    delay_sec.append(31)  # past the window: the lease may be reaped and granted to another
    assert await claim(client, "w1") is None
    assert await container_of(client).reaper.reap_once() == 1
    await register_worker(client, "w2")
    other = await claim(client, "w2")
    assert other is not None
    assert other["task"]["id"] == lapsed["id"]  # the one worker that was ever told of it
