"""A change wakes the waiting claims it is for, not all of them, and no task waits for the
recheck because of it (on both databases; claims here never look again by themselves)."""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from bloom.db.database import DatabaseTarget, StorageKind
from bloom.runtime.services.leasing import LeaseService
from bloom.runtime.services.signals import QueueSignal
from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API, claim, create_task, register_worker, success
from tests.support.databases import make_settings

WAIT = 10.0
SOON = 5.0
LISTENING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, claim_recheck_sec=3600.0)


def count_looks(client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workers whose claims looked at the queue, one entry a look."""
    leases: LeaseService = client.app.state.container.leases  # type: ignore[attr-defined]
    looks: list[str] = []
    original: Callable[..., Awaitable[Any]] = leases._try_claim

    async def counted(worker_id: str, *args: Any, **kwargs: Any) -> Any:
        looks.append(worker_id)
        return await original(worker_id, *args, **kwargs)

    monkeypatch.setattr(leases, "_try_claim", counted)
    return looks


async def waiting_claims(client: httpx.AsyncClient, names: list[str]) -> list[asyncio.Task[Any]]:
    for name in names:
        await register_worker(client, name)
    claims = [
        asyncio.create_task(client.post(f"{API}/workers/{name}/claim", json={"wait_seconds": WAIT}))
        for name in names
    ]
    await settled(client.app.state.container.signal, len(names))  # type: ignore[attr-defined]
    return claims


async def settled(signal: QueueSignal, claims: int) -> None:
    """Until `claims` claims wait, each past its look: a claim registers before it looks, and
    one still looking when a task comes could take it itself."""
    while signal.waiters < claims or any(
        not event._waiters  # nobody awaits it yet: still looking
        for event in signal._waiting
    ):
        await asyncio.sleep(0.01)


async def granted(claims: list[asyncio.Task[Any]], count: int) -> list[dict[str, Any]]:
    """The first `count` grants, each within SOON seconds."""
    grants: list[dict[str, Any]] = []
    for done in asyncio.as_completed(claims, timeout=SOON):
        response = await done
        assert response.status_code == 200, response.text
        grants.append(response.json())
        if len(grants) == count:
            return grants
    raise AssertionError("unreachable")


async def stop(claims: list[asyncio.Task[Any]]) -> None:
    for waiting in claims:
        waiting.cancel()
    await asyncio.gather(*claims, return_exceptions=True)


async def test_a_new_task_wakes_one_waiting_claim(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = await waiting_claims(client, [f"w{n}" for n in range(20)])
    looks = count_looks(client, monkeypatch)
    task = await create_task(client)
    (grant,) = await granted(claims, 1)
    assert grant["task"]["id"] == task["id"]
    await asyncio.sleep(0.2)
    # the woken claim, and the one it passed the wake on to: not twenty
    assert len(looks) <= 2, looks
    await stop(claims)


async def test_a_batch_wakes_as_many_claims_as_it_queued(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = await waiting_claims(client, [f"w{n}" for n in range(10)])
    looks = count_looks(client, monkeypatch)
    body = {"tasks": [{"context_id": f"c{n}", "agent_slug": "a", "prompt": "p"} for n in range(4)]}
    created = (await client.post(f"{API}/llm-tasks/batch", json=body)).json()["tasks"]
    grants = await granted(claims, 4)
    assert {g["task"]["id"] for g in grants} == {t["id"] for t in created}
    await asyncio.sleep(0.2)
    assert len(looks) <= 4 + 4, looks  # each grant passes one wake on, at most
    await stop(claims)


async def test_a_lease_given_to_a_worker_wakes_its_claim(client: httpx.AsyncClient) -> None:
    # Context "c" was last run by `owner`, idle now and not claiming: a new task of "c" is kept
    # for it (the sticky wait), so the waiting claims cannot take it; the lease gives it to one.
    await register_worker(client, "owner")
    await create_task(client, context_id="c")
    before = await claim(client, "owner")
    assert before is not None
    done = await client.post(f"{API}/llm-tasks/{before['task']['id']}/complete", json=success())
    assert done.status_code == 200
    names = [f"w{n}" for n in range(6)]
    claims = await waiting_claims(client, names)
    task = await create_task(client, context_id="c")
    await asyncio.sleep(0.2)
    assert not any(c.done() for c in claims)
    # the newest waiter: the last a wake of the oldest claims would reach
    leased = await client.post(f"{API}/llm-tasks/{task['id']}/lease", json={"worker_id": "w5"})
    assert leased.status_code == 201, leased.text
    (grant,) = await granted(claims, 1)
    assert (grant["task"]["id"], grant["lease"]["worker_id"]) == (task["id"], "w5")
    await stop(claims)


async def test_a_wake_that_finds_nothing_ends_there(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = await waiting_claims(client, [f"w{n}" for n in range(10)])
    looks = count_looks(client, monkeypatch)
    await register_worker(client, "late")  # wakes its own claims (none) and one other
    await asyncio.sleep(0.3)
    assert len(looks) == 1, looks  # that one found nothing and passed nothing on
    assert not any(claim.done() for claim in claims)
    await stop(claims)


async def test_a_claim_whose_caller_left_passes_its_wake_on(client: httpx.AsyncClient) -> None:
    container = client.app.state.container  # type: ignore[attr-defined]
    leases: LeaseService = container.leases
    await listening(container.db.target)  # else the create's notice may come before the listener
    await register_worker(client, "staying")
    await register_worker(client, "leaving")
    staying = asyncio.create_task(leases.claim("staying", wait_sec=WAIT))
    gone = asyncio.Event()
    leaving = asyncio.create_task(leases.claim("leaving", wait_sec=WAIT, gone=gone))
    await settled(container.signal, 2)
    task = await create_task(client)  # wakes the newest claim, the one about to hear...
    gone.set()  # ...that its caller hung up: it passes the wake on
    assert await asyncio.wait_for(leaving, SOON) is None
    claimed = await asyncio.wait_for(staying, SOON)
    assert claimed is not None
    assert claimed.task.id == task["id"]


async def listening(target: DatabaseTarget) -> None:
    """On PostgreSQL, until the runtime's listener listens and has looked at the queue once
    (as it does whenever it starts listening: notifications may have been lost before)."""
    if target.kind != StorageKind.POSTGRESQL:
        return
    conn = await asyncpg.connect(target.dsn)
    try:
        while not await conn.fetchval(LISTENING):
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    await asyncio.sleep(0.3)


async def ran_context(client: httpx.AsyncClient, worker: str, context_id: str) -> None:
    """`worker` runs and completes a task of `context_id`: the context's next task is kept for
    it (the sticky wait) while it is live with a free slot."""
    await register_worker(client, worker)
    await create_task(client, context_id=context_id)
    before = await claim(client, worker)
    assert before is not None
    done = await client.post(f"{API}/llm-tasks/{before['task']['id']}/complete", json=success())
    assert done.status_code == 200, done.text


async def test_a_task_kept_for_a_worker_wakes_that_workers_claim(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 31: the wake went to the newest waiting claim, which may not take a task kept for
    # another worker; the keeper slept on, and the task waited for the recheck (seconds, and
    # then a herd of every waiting claim). Here the claims never recheck: only the wake can.
    await ran_context(client, "owner", "c")
    claims = await waiting_claims(client, ["owner", *(f"w{n}" for n in range(5))])
    looks = count_looks(client, monkeypatch)
    task = await create_task(client, context_id="c")
    (grant,) = await granted(claims, 1)
    assert (grant["task"]["id"], grant["lease"]["worker_id"]) == (task["id"], "owner")
    await asyncio.sleep(0.2)
    assert looks[0] == "owner", looks
    assert len(looks) <= 2, looks
    await stop(claims)


async def test_the_recheck_wakes_the_claims_the_work_is_for_not_everyone(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Work no change announced (a lost notification): the recheck finds it, and wakes the
    # keeper of a kept task and one claim for a task nobody keeps, not all twelve.
    await ran_context(client, "owner", "c")
    claims = await waiting_claims(client, ["owner", *(f"w{n}" for n in range(11))])
    container = client.app.state.container  # type: ignore[attr-defined]
    await listening(container.db.target)  # its own first look is over: only ours is left
    monkeypatch.setattr(container.signal, "changed", lambda wake=None: None)
    kept = await create_task(client, context_id="c")
    free = await create_task(client, context_id="d")
    await asyncio.sleep(0.2)
    assert not any(c.done() for c in claims)
    looks = count_looks(client, monkeypatch)
    await container.leases.wake_if_ready()
    grants = await granted(claims, 2)
    by_task = {g["task"]["id"]: g["lease"]["worker_id"] for g in grants}
    assert by_task[kept["id"]] == "owner", by_task
    assert by_task[free["id"]] != "owner", by_task
    await asyncio.sleep(0.2)
    assert len(looks) <= 2 + 2, looks  # the two woken, and a wake each passes on
    await stop(claims)
