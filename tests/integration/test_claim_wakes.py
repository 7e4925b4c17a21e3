"""A change wakes the waiting claims it is for, not all of them, and no task waits for the
recheck because of it (on both databases; claims here never look again by themselves)."""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.services.leasing import LeaseService
from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API, claim, create_task, register_worker, success
from tests.support.databases import make_settings

WAIT = 10.0
SOON = 5.0


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
    container = client.app.state.container  # type: ignore[attr-defined]
    while container.signal.waiters < len(names):
        await asyncio.sleep(0.01)
    return claims


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
    leases: LeaseService = client.app.state.container.leases  # type: ignore[attr-defined]
    await register_worker(client, "staying")
    await register_worker(client, "leaving")
    staying = asyncio.create_task(leases.claim("staying", wait_sec=WAIT))
    left = False

    async def gone() -> bool:
        return left

    leaving = asyncio.create_task(leases.claim("leaving", wait_sec=WAIT, gone=gone))
    while client.app.state.container.signal.waiters < 2:  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
    left = True  # hung up, not yet noticed: the newest claim, the one a new task wakes
    task = await create_task(client)
    assert await asyncio.wait_for(leaving, SOON) is None
    claimed = await asyncio.wait_for(staying, SOON)
    assert claimed is not None
    assert claimed.task.id == task["id"]
