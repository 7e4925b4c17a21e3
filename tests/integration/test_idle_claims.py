"""Claims that find nothing, cheaply (issue 31 item 1's idle CPU): while the queue is quiet, a
claim's first look is one read, no lock and no write; its sign of life is written later with
others'; and a task queued while it reads still reaches it at once (on both databases)."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.claims import Missed
from bloom.runtime.container import Container
from bloom.runtime.services.leasing import LeaseService
from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API, claim, create_task, register_worker
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.sent import Sent

SOON = 5.0


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    # no periodic recheck: only the change's own wake can deliver a task in time
    return make_settings(database_url, tmp_path, claim_recheck_sec=3600.0)


def container_of(client: httpx.AsyncClient) -> Container:
    return client.app.state.container  # type: ignore[attr-defined,no-any-return]


async def worker(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await client.get(f"{API}/workers/{name}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def quiet(client: httpx.AsyncClient, name: str) -> None:
    """Register `name`, whose first claim then finds nothing: the queue is quiet."""
    await register_worker(client, name)
    assert await claim(client, name) is None


async def test_a_claim_in_a_quiet_queue_reads_once_and_writes_nothing(
    client: httpx.AsyncClient, sent: Sent
) -> None:
    await quiet(client, "w1")
    sent.clear()
    assert await claim(client, "w1") is None
    assert (len(sent.statements), sent.transactions) == (1, 0), sent.statements
    await create_task(client)  # a change: the next claim looks at once, no read before
    sent.clear()
    assert await claim(client, "w1") is not None
    assert len(sent.statements) == 2, sent.statements  # check-in, then claim and grant


async def test_a_claim_found_idle_at_a_glance_is_a_sign_of_life(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await quiet(client, "w1")
    clock.advance(30)
    assert await claim(client, "w1") is None
    await container_of(client).leases.note_seen()
    assert (await worker(client, "w1"))["last_heartbeat"] == clock.now


async def test_an_offline_worker_is_online_again_with_its_next_claim(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await quiet(client, "w1")
    clock.advance(120)
    async with container_of(client).db.write() as tx:
        assert await tx.workers.mark_gone("w1", silent_since=clock.now)
    assert (await worker(client, "w1"))["status"] == "offline"
    assert await claim(client, "w1") is None
    seen = await worker(client, "w1")
    assert (seen["status"], seen["last_heartbeat"]) == ("online", clock.now)


async def test_a_task_queued_while_a_claim_reads_reaches_it_at_once(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim registers to be woken before its read: a task created between the read and
    its wait wakes it, with no recheck to fall back on."""
    await quiet(client, "w1")
    leases: LeaseService = container_of(client).leases
    read = leases._first_look
    created: list[dict[str, Any]] = []

    async def then_a_task(worker_id: str) -> Missed | None:
        missed = await read(worker_id)
        assert missed is Missed.NOTHING, "the read saw an empty queue"
        created.append(await create_task(client))
        return missed

    monkeypatch.setattr(leases, "_first_look", then_a_task)
    grant = await asyncio.wait_for(claim(client, "w1", wait=60), SOON)
    assert grant is not None
    assert [grant["task"]["id"]] == [task["id"] for task in created]


async def test_signs_of_life_go_to_online_workers_and_only_forward(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    for name in ("w1", "w2", "w3"):
        await register_worker(client, name)
    db = container_of(client).db
    earlier = clock.now
    clock.advance(60)
    async with db.write() as tx:
        assert await tx.workers.mark_gone("w2", silent_since=clock.now)
    async with db.single() as tx:
        await tx.workers.seen(["w1", "w2", "w3", "nobody"], clock.now)
        await tx.workers.seen(["w3"], earlier)  # noted late: not back in time
    found = {name: await worker(client, name) for name in ("w1", "w2", "w3")}
    assert {name: (w["status"], w["last_heartbeat"]) for name, w in found.items()} == {
        "w1": ("online", clock.now),
        "w2": ("offline", earlier),
        "w3": ("online", clock.now),
    }
