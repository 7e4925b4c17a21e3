"""Crash safety, on both databases: `kill -9` of the server in the middle of a load, then a
restart on the same database, loses no acknowledged task, completes none twice, and returns the
tasks of the leases that were live at the crash to the queue by expiring those leases.
"""

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.storage.tables import llm_tasks
from tests.support.api import API, success
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess

SHORT_LEASES = {
    "BLOOM_LEASE_TTL_SEC": "5",
    "BLOOM_CLAIM_ACK_SEC": "2",
    "BLOOM_REAPER_INTERVAL_SEC": "0.5",
}

CONSUMERS = {"cw1": 2, "cw2": 2, "cw3": 2}  # worker -> max_concurrency, one claimer per slot
HOLDER = "holder"  # two claimers that sit on their tasks, heartbeating, until the crash
HOLDER_SLOTS = 2


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[RuntimeProcess]:
    process = RuntimeProcess(database_url, tmp_path, **SHORT_LEASES)
    process.start()
    yield process
    process.stop()


@dataclass
class Load:
    """What the clients did and saw. `generation` counts server starts: a worker whose server
    restarted forgets the leases it held and claims afresh."""

    generation: int = 0
    acknowledged: set[str] = field(default_factory=set)
    acknowledged_after_restart: int = 0
    unanswered_creates: int = 0
    completions: list[tuple[str, str]] = field(default_factory=list)  # (task, lease) answered 200
    held: dict[str, str] = field(default_factory=dict)  # holders' leases: lease -> task
    transport_errors: int = 0
    fenced: Counter[str] = field(default_factory=Counter)
    stop_producing: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    crashed: asyncio.Event = field(default_factory=asyncio.Event)


async def produce(http: httpx.AsyncClient, load: Load) -> None:
    """Create tasks until told to stop. A 201 is an acknowledgement: that task must survive. A
    create whose answer never came may or may not exist; either is fine."""
    while not load.stop_producing.is_set():
        body = {
            "context_id": f"ctx-{uuid.uuid4().hex[:8]}",
            "agent_slug": "default",
            "prompt": "Say hello",
            "max_attempts": 10,  # a crash costs attempts; this test is about losing none
        }
        generation = load.generation
        try:
            response = await http.post(f"{API}/llm-tasks", json=body)
        except httpx.TransportError:
            load.unanswered_creates += 1
            load.transport_errors += 1
            await asyncio.sleep(0.05)
            continue
        assert response.status_code == 201, response.text
        load.acknowledged.add(response.json()["id"])
        if generation > 0:
            load.acknowledged_after_restart += 1
        await asyncio.sleep(0.03)


async def work_one(http: httpx.AsyncClient, worker: str, load: Load) -> None:
    """One claim → heartbeat → complete. A lease from before a restart is dropped, not used."""
    generation = load.generation
    response = await http.post(f"{API}/workers/{worker}/claim", json={"wait_seconds": 0.5})
    if response.status_code == 204:
        return
    assert response.status_code == 200, response.text
    task_id, lease_id = response.json()["task"]["id"], response.json()["lease"]["id"]
    for action, body in (
        ("heartbeat", {"lease_id": lease_id}),
        ("complete", success(f"out-{task_id}", lease_id=lease_id)),
    ):
        if load.generation != generation:
            return
        answer = await http.post(f"{API}/llm-tasks/{task_id}/{action}", json=body)
        if answer.status_code == 409:
            # The 2 s claim-ack window can lapse on a loaded machine; the task is requeued.
            load.fenced[action] += 1
            return
        assert answer.status_code == 200, answer.text
    load.completions.append((task_id, lease_id))


async def consume(http: httpx.AsyncClient, worker: str, load: Load) -> None:
    """A worker slot: work tasks until the test ends, riding out the crash."""
    while not load.stop.is_set():
        try:
            await work_one(http, worker, load)
        except httpx.TransportError:
            load.transport_errors += 1
            await asyncio.sleep(0.05)


async def hold_then_consume(http: httpx.AsyncClient, load: Load) -> None:
    """Claim a task and keep it alive with heartbeats until the server dies under it; after the
    restart, work like any other slot."""
    try:
        while not load.crashed.is_set():
            response = await http.post(f"{API}/workers/{HOLDER}/claim", json={"wait_seconds": 0.5})
            assert response.status_code in (200, 204), response.text
            if response.status_code == 204:
                continue
            task_id, lease_id = response.json()["task"]["id"], response.json()["lease"]["id"]
            load.held[lease_id] = task_id
            if await keep_alive(http, task_id, lease_id, load):
                break
            load.held.pop(lease_id)  # its 2 s claim-ack window lapsed on a busy machine: again
    except httpx.TransportError:
        load.transport_errors += 1
    await consume(http, HOLDER, load)


async def keep_alive(http: httpx.AsyncClient, task_id: str, lease_id: str, load: Load) -> bool:
    """Heartbeat every 0.5 s until the crash (True), or until the lease is lost (False)."""
    while not load.crashed.is_set():
        beat = await http.post(f"{API}/llm-tasks/{task_id}/heartbeat", json={"lease_id": lease_id})
        if beat.status_code == 409:
            load.fenced["hold"] += 1
            return False
        assert beat.status_code == 200, beat.text
        await asyncio.sleep(0.5)
    return True


async def wait_until(
    condition: Callable[[], Any], what: str, timeout: float, server: RuntimeProcess
) -> None:
    """Poll `condition` (run in a thread: it may query the database) until true."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(condition):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{server.log()[-4000:]}")
        await asyncio.sleep(0.1)


async def test_kill_nine_under_load_loses_nothing_and_requeues_live_leases(
    server: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """Under a producer and eight claimers, two of them sitting on heartbeated tasks, the server
    is killed with SIGKILL and restarted on the same database. Afterwards every acknowledged task
    exists and is completed, each with exactly one success result, one artifact and one
    task_completed entry; every lease that was active at the crash ended `expired` (with a
    lease_expired entry), its task was requeued and then completed under a newer lease."""
    load = Load()
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as http:
        for worker, slots in [*CONSUMERS.items(), (HOLDER, HOLDER_SLOTS)]:
            body = {"name": worker, "capabilities": {"claude_cli": True, "max_concurrency": slots}}
            assert (await http.post(f"{API}/workers", json=body)).status_code == 201
        async with asyncio.TaskGroup() as group:
            producers = [group.create_task(produce(http, load)) for _ in range(2)]
            for worker, slots in CONSUMERS.items():
                for _ in range(slots):
                    group.create_task(consume(http, worker, load))
            for _ in range(HOLDER_SLOTS):
                group.create_task(hold_then_consume(http, load))

            await wait_until(
                lambda: (
                    len(load.held) == HOLDER_SLOTS
                    and len(load.completions) >= 40
                    and len(load.acknowledged) >= 80
                ),
                "the load to get going",
                30,
                server,
            )
            server.kill()  # SIGKILL: no shutdown, no cleanup
            load.crashed.set()
            await asyncio.sleep(0.3)  # let the database finish whatever was already sent to it
            live_at_crash = {lease["id"]: lease for lease in probe.active_leases()}
            leases_at_crash = {lease["id"] for lease in probe.all_leases()}
            tasks_at_crash = {task["id"] for task in probe.tasks()}

            load.generation += 1
            await asyncio.to_thread(server.start)  # same port, same database
            await wait_until(
                lambda: load.acknowledged_after_restart >= 20, "creates after restart", 30, server
            )
            load.stop_producing.set()
            await asyncio.gather(*producers)
            await wait_until(
                lambda: probe.count(llm_tasks, llm_tasks.c.status != "completed") == 0,
                "every task to be completed",
                45,
                server,
            )
            load.stop.set()

    assert load.transport_errors > 0  # the clients did feel the crash
    assert set(load.held) <= set(live_at_crash)
    assert_nothing_lost_nothing_doubled(probe, load, tasks_at_crash)
    assert_live_leases_expired_and_requeued(probe, live_at_crash, leases_at_crash)


def assert_nothing_lost_nothing_doubled(
    probe: DatabaseProbe, load: Load, tasks_at_crash: set[str]
) -> None:
    tasks = {task["id"]: task for task in probe.tasks()}
    assert load.acknowledged <= set(tasks), "acknowledged tasks are missing"
    assert tasks_at_crash <= set(tasks)
    assert {task["status"] for task in tasks.values()} == {"completed"}

    results = probe.results()
    assert Counter(r["task_id"] for r in results) == Counter(set(tasks))
    assert {r["status"] for r in results} == {"success"}
    by_task = {r["task_id"]: r for r in results}
    for task_id, lease_id in load.completions:  # what the clients were told is what was kept
        assert by_task[task_id]["lease_id"] == lease_id
    assert len({task for task, _ in load.completions}) == len(load.completions)

    artifacts = probe.artifacts()
    assert Counter(a["task_id"] for a in artifacts) == Counter(set(tasks))
    assert {a["id"] for a in artifacts} == {r["artifact_id"] for r in results}
    assert all(a["content"] == f"out-{a['task_id']}" for a in artifacts)

    completed = Counter(e["task_id"] for e in probe.audit() if e["action"] == "task_completed")
    assert completed == Counter(set(tasks))
    released = Counter(
        lease["task_id"] for lease in probe.all_leases() if lease["status"] == "released"
    )
    assert released == Counter(set(tasks))  # one finished lease per task; every other one expired
    assert {lease["status"] for lease in probe.all_leases()} <= {"released", "expired"}


def assert_live_leases_expired_and_requeued(
    probe: DatabaseProbe, live_at_crash: dict[str, dict[str, Any]], leases_at_crash: set[str]
) -> None:
    assert live_at_crash, "no lease was live at the crash: the test proved nothing"
    leases = {lease["id"]: lease for lease in probe.all_leases()}
    results = {r["task_id"]: r for r in probe.results()}
    expired_entries = {e["entity_id"]: e for e in probe.audit() if e["action"] == "lease_expired"}
    for lease_id, before in live_at_crash.items():
        task_id = before["task_id"]
        after = leases[lease_id]
        assert after["status"] == "expired", after
        assert expired_entries[lease_id]["task_id"] == task_id
        trail = probe.audit(task_id)
        requeued = [e for e in trail if e["action"] == "task_requeued"]
        assert any(e["timestamp"] == after["ended_at"] for e in requeued), trail
        assert results[task_id]["lease_id"] not in leases_at_crash  # a lease granted since
