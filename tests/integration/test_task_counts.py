"""The kept counts (`task_counts`, kept by migration 0011's triggers) on both databases: equal to
a full count of the tasks per status and of the leases after a seeded random mix of everything
that changes a task's status, after changes racing each other, and after a bulk fill; and what
the overview, the task list and /stats show is them."""

import asyncio
import random
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from bloom.db.database import resolve_database
from bloom.domain.errors import ServiceError
from bloom.domain.models import Completion
from bloom.domain.states import ResultStatus
from bloom.runtime.container import Container
from bloom.runtime.services.attempts import Ending
from bloom.runtime.services.leasing import Claimed
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage import bulk
from bloom.runtime.storage.tables import leases, llm_tasks, task_counts
from tests.support.api import API, claim, create_task, register_worker
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe

WORKERS = {"w0": 1, "w1": 2, "w2": 4}
OUTCOMES = ("success", "error", "fatal", "rate_limited")


async def assert_counts_agree(container: Container, probe: DatabaseProbe) -> None:
    """The kept counts equal a full count, and every reader of them shows them."""
    by_status, lease_total = probe.full_counts()
    assert probe.kept_counts() == (by_status, lease_total)
    assert await container.tasks.counts() == by_status
    overview = await container.history.overview(window_ms=3_600_000, bucket_ms=60_000)
    assert overview.counts == by_status
    stats = await container.records.stats()
    assert stats.tasks == {
        "total": sum(by_status.values()),
        "by_status": {status: n for status, n in by_status.items() if n},
    }
    assert stats.leases["total"] == lease_total
    assert stats.leases["active"] == probe.count(leases, leases.c.status == "active")


def completion(outcome: str) -> Completion:
    success = outcome == "success"
    return Completion(
        status=ResultStatus.SUCCESS if success else ResultStatus.ERROR,
        output="out" if success else None,
        error_message=None if success else "boom",
        metrics={},
        error_code=None if outcome in ("success", "error") else outcome,
    )


async def register_workers(container: Container) -> None:
    for name, slots in WORKERS.items():
        capabilities = {"claude_cli": True, "max_concurrency": slots, "labels": []}
        await container.workers.register(Registration(name=name, capabilities=capabilities))


class Mix:
    """A seeded run of random operations against the services; refusals are part of the mix."""

    def __init__(self, container: Container, clock: FakeClock, probe: DatabaseProbe, seed: int):
        self.container, self.clock, self.probe = container, clock, probe
        self.rng = random.Random(seed)
        self.tasks: list[str] = []
        self.leases: dict[str, str] = {}  # lease id: task id
        self.refused = 0
        self.done: dict[str, int] = {}

    def completion(self, outcome: str) -> Completion:
        return completion(outcome)

    def new_task(self) -> NewTask:
        if self.rng.random() < 0.3:  # a key's requests are all alike: a replay
            key = f"key-{self.rng.randrange(40)}"
            return NewTask(context_id=key, agent_slug="a", prompt="p", idempotency_key=key)
        return NewTask(
            context_id=f"c{self.rng.randrange(6)}",
            agent_slug=self.rng.choice(["a", "b"]),
            prompt="p",
            max_attempts=self.rng.randint(1, 3),
        )

    def granted(self, claimed: Any) -> None:
        for grant in claimed if isinstance(claimed, tuple) else ():
            assert isinstance(grant, Claimed)
            self.leases[grant.lease.id] = grant.task.id

    def a_lease(self) -> tuple[str, str] | None:
        if not self.leases:
            return None
        lease_id = self.rng.choice(sorted(self.leases))
        return self.leases[lease_id], lease_id

    async def step(self) -> None:
        c, rng = self.container, self.rng
        op = rng.choices(
            [
                "create",
                "create_many",
                "claim",
                "push",
                "heartbeat",
                "complete",
                "complete_many",
                "cancel",
                "requeue",
                "reap",
                "delete",
            ],
            weights=[12, 4, 12, 3, 10, 12, 4, 4, 4, 3, 1],
        )[0]
        self.done[op] = self.done.get(op, 0) + 1
        held = self.a_lease()
        some_task = rng.choice(self.tasks) if self.tasks else "none"
        calls: dict[str, Any] = {
            "create": lambda: c.tasks.create(self.new_task()),
            "create_many": lambda: c.tasks.create_many(
                [self.new_task() for _ in range(rng.randint(1, 6))]
            ),
            "claim": lambda: c.leases.claim(rng.choice(sorted(WORKERS)), wait_sec=0),
            "push": lambda: c.leases.lease(some_task),
            "heartbeat": lambda: c.attempts.heartbeat(held[0], lease_id=held[1]) if held else None,
            "complete": lambda: (
                c.attempts.complete(
                    held[0], self.completion(rng.choice(OUTCOMES)), lease_id=held[1]
                )
                if held
                else None
            ),
            "complete_many": self.complete_many,
            "cancel": lambda: c.tasks.cancel(some_task),
            "requeue": lambda: c.tasks.requeue(some_task),
            "reap": self.reap,
            "delete": self.delete,
        }
        try:
            call = calls[op]()
            result = await call if isinstance(call, Awaitable) else call
        except ServiceError:
            self.refused += 1
            return
        if op == "create":
            self.tasks.append(result[0].id)
        elif op == "create_many":
            self.tasks += [task.id for task, _ in result]
        elif op == "claim" and result is not None:
            self.leases[result.lease.id] = result.task.id
        elif op == "push":
            self.leases[result[0].id] = some_task

    async def complete_many(self) -> None:
        """A worker's held leases (and one it no longer holds, at times) ended in one call that
        claims its next tasks."""
        worker = self.rng.choice(sorted(WORKERS))
        mine = [lease for lease in self.probe.active_leases() if lease["worker_id"] == worker]
        endings = [
            Ending(lease["task_id"], self.completion(self.rng.choice(OUTCOMES)), lease["id"])
            for lease in mine
        ]
        if self.rng.random() < 0.2 and (held := self.a_lease()):
            endings.append(Ending(held[0], self.completion("success"), held[1]))
        if not endings:
            return
        done = await self.container.attempts.complete_many(
            endings, worker, claim_next=self.container.leases.next_look(None, 2)
        )
        self.granted(done.next)

    async def reap(self) -> None:
        self.clock.advance(self.rng.choice([31, 301, 900]))
        await self.container.reaper.reap_once()

    async def delete(self) -> None:
        """No use case deletes a task yet: one is deleted by hand, with its leases."""
        if not self.tasks:
            return
        task_id = self.tasks.pop(self.rng.randrange(len(self.tasks)))
        with self.probe.engine.begin() as conn:
            conn.execute(delete(leases).where(leases.c.task_id == task_id))
            conn.execute(delete(llm_tasks).where(llm_tasks.c.id == task_id))
        self.leases = {lease: task for lease, task in self.leases.items() if task != task_id}


@pytest.mark.parametrize("seed", [1, 2])
async def test_counts_equal_a_full_count_after_a_random_mix(
    container: Container, clock: FakeClock, probe: DatabaseProbe, seed: int
) -> None:
    """Creates (single, batched, replayed by key), claims, pushed leases, heartbeats, completes
    (alone and batched with a claim; successes, retried and final failures, rate limits, stale
    leases), cancels, requeues, expiries and deletes in a seeded order: the kept counts equal a
    full count at every checkpoint."""
    await register_workers(container)
    mix = Mix(container, clock, probe, seed)
    for step in range(1, 401):
        await mix.step()
        if step % 50 == 0:
            await assert_counts_agree(container, probe)
    by_status, lease_total = probe.full_counts()
    reached = ("queued", "completed", "failed", "dead", "cancelled")
    assert all(by_status[s] for s in reached), (by_status, mix.done)  # the mix went everywhere
    assert lease_total > 50, mix.done
    assert mix.refused > 0


async def test_counts_hold_under_racing_changes(
    container: Container, clock: FakeClock, probe: DatabaseProbe, database_url: str
) -> None:
    """Creates, claims, duplicate completes (the same end twice at once: counted once),
    conflicting ends and cancels racing each other, each on its own connection (PostgreSQL,
    where concurrent transactions count into different slots)."""
    await register_workers(container)
    news = [NewTask(context_id=f"c{i}", agent_slug="a", prompt="p") for i in range(40)]
    created = await asyncio.gather(*(container.tasks.create(new) for new in news))
    claims = [container.leases.claim(w, wait_sec=0) for w in WORKERS for _ in range(4)]
    claimed = [grant for grant in await asyncio.gather(*claims) if grant is not None]
    assert len(claimed) == sum(WORKERS.values())
    await asyncio.gather(
        *(container.attempts.heartbeat(g.task.id, lease_id=g.lease.id) for g in claimed[::2])
    )

    def end(grant: Claimed, outcome: str) -> Any:
        return container.attempts.complete(
            grant.task.id, completion(outcome), lease_id=grant.lease.id
        )

    racing = [end(grant, OUTCOMES[i % 2]) for i, grant in enumerate(claimed) for _ in range(2)]
    racing += [end(claimed[0], "fatal")]  # another end of a lease already being ended
    queued = [task.id for task, _ in created if task.id not in {g.task.id for g in claimed}]
    racing += [container.tasks.cancel(task_id) for task_id in queued[:10]]
    racing += [container.leases.claim(w, wait_sec=0) for w in WORKERS for _ in range(3)]
    outcomes = await asyncio.gather(*racing, return_exceptions=True)
    assert all(not isinstance(o, Exception) or isinstance(o, ServiceError) for o in outcomes)
    await assert_counts_agree(container, probe)
    first_lost = probe.task(claimed[0].task.id)["status"] != "completed"  # to the fatal end
    assert probe.full_counts()[0]["completed"] == len(claimed[::2]) - first_lost
    if database_url.startswith("postgresql"):
        used = probe.count(task_counts, task_counts.c.queued != 0)
        assert used > 1  # the creates' transactions counted into several slots


async def test_a_bulk_fill_is_counted(
    container: Container, probe: DatabaseProbe, database_url: str, tmp_path: Path
) -> None:
    """`bloom bench`'s fills insert rows by the thousand with PostgreSQL's counting triggers
    off, then count them: the counts agree as after any change."""
    await container.tasks.create(NewTask(context_id="c", agent_slug="a", prompt="p"))
    target = resolve_database(database_url, tmp_path)
    assert bulk.fill_queue(target, 120) == 119
    await assert_counts_agree(container, probe)
    assert (await container.tasks.counts())["queued"] == 120
    await container.tasks.create(NewTask(context_id="c", agent_slug="a", prompt="p"))
    assert (await container.tasks.counts())["queued"] == 121  # the triggers are back on


async def test_the_stats_route_and_the_pages_show_the_counts(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """GET /stats answers the seed's shape from the kept counts (the statuses some task is
    in), and the task list's badges show every status's count."""
    await register_worker(client, "w1", slots=2)
    for n in range(3):
        await create_task(client, context_id=f"c{n}")
    assert await claim(client, "w1") is not None
    answer = await client.get(f"{API}/stats")
    assert answer.status_code == 200, answer.text
    by_status, lease_total = probe.full_counts()
    assert answer.json()["tasks"] == {"total": 3, "by_status": {"queued": 2, "leased": 1}}
    assert answer.json()["leases"] == {"total": lease_total, "active": 1}
    page = await client.get("/tasks")
    assert all(f"{status} {n}</a>" in page.text for status, n in by_status.items())
