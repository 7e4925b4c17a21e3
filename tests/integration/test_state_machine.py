"""The task/lease lifecycle under random interleavings (a hypothesis state machine).

Every operation a client, a worker or the reaper can perform is a rule; hypothesis runs random
sequences of them (with time moving in between) against the real services on both databases. A
small, independent model predicts each outcome, and after every step the database must agree with
the model and satisfy the engine's invariants: one active lease per task in flight and none
otherwise, no worker above its capacity, at most one result per lease, exactly one success per
completed task, one artifact per result that has output, refused operations change nothing, and
the kept counts per status (`task_counts`) are the model's.
"""

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, select

from bloom.domain.errors import Conflict, ServiceError, Unavailable
from bloom.domain.models import Completion
from bloom.domain.states import ResultStatus, TaskStatus
from bloom.runtime.container import Container, build_container
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage.repositories import Repositories
from bloom.runtime.storage.tables import (
    audit_logs,
    leases,
    llm_results,
    llm_tasks,
    runtime_artifacts,
)
from tests.support.clock import FakeClock
from tests.support.databases import fresh_postgres_url, fresh_sqlite_url, make_settings

T = TypeVar("T")
CAPACITY = {"w0": 1, "w1": 2, "w2": 1}
TTL_MS, ACK_MS, STICKY_MS = 300_000, 30_000, 30_000
CONTEXTS = ["c0", "c1", "c2"]
IN_FLIGHT = {"leased", "running"}


@dataclass
class ModelTask:
    id: str
    context: str
    status: str
    attempts: int
    max_attempts: int
    queued_at: int
    lease_id: str | None = None
    cancel_requested: bool = False
    not_before: int | None = None


@dataclass
class ModelLease:
    id: str
    task_id: str
    worker: str
    started_at: int
    expires_at: int
    status: str = "active"
    delivered: bool = True
    last_heartbeat: int = 0
    result_status: str | None = None


async def scalar(tx: Repositories, statement: Any) -> Any:
    [row] = await tx.connection.execute(statement)
    return next(iter(row.values()))


async def records(tx: Repositories, statement: Any) -> list[SimpleNamespace]:
    return [SimpleNamespace(**row) for row in await tx.connection.execute(statement)]


class LifecycleMachine(RuleBasedStateMachine):
    database_factory: Callable[[], str]
    cleanup: Callable[[str], None]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.url = self.database_factory()
        self.container: Container = build_container(
            make_settings(self.url, Path("/nonexistent"), sticky_wait_sec=STICKY_MS / 1000),
            self.clock,
        )
        self.tasks: dict[str, ModelTask] = {}
        self.leases: dict[str, ModelLease] = {}
        self.last_seen: dict[str, int] = {}
        self.online: dict[str, bool] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.container.db.dispose())
        self.loop.close()
        self.cleanup(self.url)

    # model helpers

    def active_leases(self, worker: str) -> list[ModelLease]:
        return [
            lease
            for lease in self.leases.values()
            if lease.worker == worker and lease.status == "active"
        ]

    def live(self, lease: ModelLease) -> bool:
        return lease.status == "active" and lease.expires_at >= self.clock.now

    def claimable_by(self, task: ModelTask, worker: str) -> bool:
        if task.status != "queued" or (task.not_before or 0) > self.clock.now:
            return False
        held = [
            lease
            for lease in self.leases.values()
            if self.tasks[lease.task_id].context == task.context
        ]
        if not held or task.queued_at < self.clock.now - STICKY_MS:
            return True
        owner = max(held, key=lambda lease: (lease.started_at, lease.id)).worker
        owner_can_take = (
            owner != worker
            and self.online[owner]
            and self.last_seen[owner] >= self.clock.now - 60_000
            and len(self.active_leases(owner)) < CAPACITY[owner]
        )
        return not owner_can_take

    def snapshot(self) -> tuple[int, ...]:
        """Row counts and the sum of lease expiries: any change shows."""

        async def read() -> tuple[int, ...]:
            async with self.container.db.read() as tx:
                counts = []
                for table in (llm_tasks, leases, llm_results, runtime_artifacts, audit_logs):
                    counts.append(await scalar(tx, select(func.count()).select_from(table)))
                expiry = await scalar(tx, select(func.coalesce(func.sum(leases.c.expires_at), 0)))
                statuses = await scalar(
                    tx, select(func.count()).where(llm_tasks.c.status == "running")
                )
                return (*counts, int(expiry), statuses)

        return self.run(read())

    def refused(self, call: Coroutine[Any, Any, Any], *errors: type[ServiceError]) -> None:
        """The call must be refused with one of `errors` and change nothing."""
        before = self.snapshot()
        with pytest.raises(errors):
            self.run(call)
        assert self.snapshot() == before

    # rules

    @initialize()
    def register_workers(self) -> None:
        for name, slots in CAPACITY.items():
            capabilities = {"claude_cli": True, "max_concurrency": slots, "labels": []}
            self.run(
                self.container.workers.register(Registration(name=name, capabilities=capabilities))
            )
            self.last_seen[name] = self.clock.now
            self.online[name] = True

    @rule(max_attempts=st.integers(1, 3), context=st.sampled_from(CONTEXTS))
    def create(self, max_attempts: int, context: str) -> None:
        new = NewTask(context_id=context, agent_slug="a", prompt="p", max_attempts=max_attempts)
        task, created = self.run(self.container.tasks.create(new))
        assert created
        assert task.status == "queued"
        self.tasks[task.id] = ModelTask(task.id, context, "queued", 0, max_attempts, self.clock.now)

    @rule(worker=st.sampled_from(sorted(CAPACITY)))
    def claim(self, worker: str) -> None:
        self.last_seen[worker] = self.clock.now
        self.online[worker] = True
        undelivered = [
            lease
            for lease in self.active_leases(worker)
            if not lease.delivered and self.live(lease)
        ]
        full = len(self.active_leases(worker)) >= CAPACITY[worker]
        claimable = [t for t in self.tasks.values() if self.claimable_by(t, worker)]
        claimed = self.run(self.container.leases.claim(worker, wait_sec=0))
        self.run(self.container.leases.note_seen())  # what the claims-seen loop writes each second
        if claimed is None:
            assert not undelivered
            assert full or not claimable, "a claimable task was left in the queue"
            return
        lease = claimed.lease
        if undelivered:
            assert lease.id == min(undelivered, key=lambda x: (x.started_at, x.id)).id
            self.leases[lease.id].delivered = True
            return
        assert not full, f"{worker} went above its capacity"
        assert claimed.task.id in {t.id for t in claimable}
        # equal priorities: the oldest task wins (ids are time-ordered)
        assert claimed.task.id == min(claimable, key=lambda t: t.id).id
        task = self.tasks[claimed.task.id]
        task.status, task.lease_id, task.attempts = "leased", lease.id, task.attempts + 1
        assert lease.expires_at == self.clock.now + ACK_MS
        self.leases[lease.id] = ModelLease(
            lease.id,
            task.id,
            worker,
            self.clock.now,
            lease.expires_at,
            last_heartbeat=self.clock.now,
        )

    @rule(data=st.data(), choose=st.booleans())
    def push_lease(self, data: st.DataObject, choose: bool) -> None:
        if not self.tasks:
            return
        task = self.tasks[data.draw(st.sampled_from(sorted(self.tasks)))]
        worker = data.draw(st.sampled_from(sorted(CAPACITY))) if choose else None
        candidates = [
            w
            for w in ([worker] if worker else CAPACITY)
            if self.online[w] and len(self.active_leases(w)) < CAPACITY[w]
        ]
        call = self.container.leases.lease(task.id, worker_id=worker)
        if task.status != "queued":
            self.refused(call, Conflict)
            return
        if not candidates:
            self.refused(call, Unavailable)
            return
        lease, chosen = self.run(call)
        assert chosen.id in candidates
        assert lease.expires_at == self.clock.now + TTL_MS
        task.status, task.lease_id, task.attempts = "leased", lease.id, task.attempts + 1
        self.leases[lease.id] = ModelLease(
            lease.id,
            task.id,
            chosen.id,
            self.clock.now,
            lease.expires_at,
            delivered=False,
            last_heartbeat=self.clock.now,
        )

    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        if not self.leases:
            return
        lease = self.leases[data.draw(st.sampled_from(sorted(self.leases)))]
        call = self.container.attempts.heartbeat(lease.task_id, lease_id=lease.id)
        if not self.live(lease):
            self.refused(call, Conflict)
            return
        beat = self.run(call)
        lease.expires_at, lease.delivered = self.clock.now + TTL_MS, True
        lease.last_heartbeat = self.clock.now
        assert beat.lease.expires_at == lease.expires_at
        task = self.tasks[lease.task_id]
        task.status = "running"
        assert beat.task_status == "running"
        assert beat.cancel_requested == task.cancel_requested

    @rule(data=st.data(), outcome=st.sampled_from(["success", "error", "fatal", "rate_limited"]))
    def complete(self, data: st.DataObject, outcome: str) -> None:
        if not self.leases:
            return
        lease = self.leases[data.draw(st.sampled_from(sorted(self.leases)))]
        status = ResultStatus.SUCCESS if outcome == "success" else ResultStatus.ERROR
        completion = Completion(
            status=status,
            output="out" if status == "success" else None,
            error_message=None if status == "success" else "boom",
            metrics={"duration_ms": 1},
            error_code=None if outcome in ("success", "error") else outcome,
        )
        call = self.container.attempts.complete(lease.task_id, completion, lease_id=lease.id)
        if lease.result_status is not None:
            if lease.result_status != status:
                self.refused(call, Conflict)
                return
            before = self.snapshot()
            assert self.run(call).replayed
            assert self.snapshot() == before
            return
        if not self.live(lease):
            self.refused(call, Conflict)
            return
        done = self.run(call)
        assert not done.replayed
        lease.status, lease.result_status = "released", status
        task = self.tasks[lease.task_id]
        if status == "success":
            task.status = "completed"
        elif task.cancel_requested:
            task.status = "cancelled"
        elif outcome == "fatal":
            task.status = "failed"
        elif outcome == "rate_limited":
            task.status, task.attempts, task.lease_id = "queued", task.attempts - 1, None
            task.not_before, task.queued_at = self.clock.now + 60_000, self.clock.now
        elif task.attempts >= task.max_attempts:
            task.status = "dead"
        else:
            task.status, task.lease_id, task.queued_at = "queued", None, self.clock.now
            task.not_before = self.clock.now + 15_000 * 2 ** (task.attempts - 1)
        assert done.task.status == task.status
        assert (done.artifact is not None) == (status == "success")

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.tasks:
            return
        task = self.tasks[data.draw(st.sampled_from(sorted(self.tasks)))]
        call = self.container.tasks.cancel(task.id)
        if task.status not in {"queued", *IN_FLIGHT}:
            self.refused(call, Conflict)
            return
        result = self.run(call)
        if task.status == "queued":
            task.status = "cancelled"
        else:
            task.cancel_requested = True
        assert result.status == task.status

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        if not self.tasks:
            return
        task = self.tasks[data.draw(st.sampled_from(sorted(self.tasks)))]
        call = self.container.tasks.requeue(task.id)
        if task.status not in {"failed", "dead"}:
            self.refused(call, Conflict)
            return
        self.run(call)
        task.status, task.attempts, task.lease_id = "queued", 0, None
        task.not_before, task.cancel_requested, task.queued_at = None, False, self.clock.now

    @rule(seconds=st.sampled_from([1, 10, 31, 61, 301]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def reap(self) -> None:
        expired = [
            lease
            for lease in self.leases.values()
            if lease.status == "active" and lease.expires_at < self.clock.now
        ]
        assert self.run(self.container.reaper.reap_once()) == len(expired)
        for lease in expired:
            lease.status = "expired"
            if self.last_seen[lease.worker] <= lease.last_heartbeat:
                self.online[lease.worker] = False  # silent since: presumed gone
            task = self.tasks[lease.task_id]
            if task.lease_id != lease.id or task.status not in IN_FLIGHT:
                continue
            if task.cancel_requested:
                task.status = "cancelled"
            elif task.attempts >= task.max_attempts:
                task.status = "dead"
            else:
                task.status, task.lease_id, task.queued_at, task.not_before = (
                    "queued",
                    None,
                    self.clock.now,
                    None,
                )

    # invariants

    @invariant()
    def kept_counts_agree_with_the_model(self) -> None:
        counted = self.run(self.container.tasks.counts())
        statuses = [task.status for task in self.tasks.values()]
        assert counted == {str(s): statuses.count(str(s)) for s in TaskStatus}

    @invariant()
    def database_agrees_with_model_and_invariants(self) -> None:
        async def read() -> tuple[list[Any], list[Any], list[Any], int]:
            async with self.container.db.read() as tx:
                task_rows = await records(tx, select(llm_tasks))
                lease_rows = await records(tx, select(leases))
                result_rows = await records(tx, select(llm_results))
                artifacts = await scalar(tx, select(func.count()).select_from(runtime_artifacts))
                return task_rows, lease_rows, result_rows, artifacts

        task_rows, lease_rows, result_rows, artifacts = self.run(read())
        active = [lease for lease in lease_rows if lease.status == "active"]
        for row in task_rows:
            model = self.tasks[row.id]
            assert (
                row.status,
                row.attempts,
                row.lease_id if row.status in IN_FLIGHT else None,
            ) == (
                model.status,
                model.attempts,
                model.lease_id if model.status in IN_FLIGHT else None,
            ), row.id
            assert row.cancel_requested == model.cancel_requested
            mine = [lease.id for lease in active if lease.task_id == row.id]
            assert mine == ([row.lease_id] if row.status in IN_FLIGHT else [])
            successes = [r for r in result_rows if r.task_id == row.id and r.status == "success"]
            assert len(successes) == (1 if row.status == "completed" else 0)
            assert row.attempts <= row.max_attempts
        statuses = self.run(self.container.workers.find())
        assert {w.id: w.status == "online" for w in statuses} == self.online
        for worker, slots in CAPACITY.items():
            assert sum(1 for lease in active if lease.worker_id == worker) <= slots
        for row in lease_rows:
            assert row.status == self.leases[row.id].status, row.id
        lease_ids = [r.lease_id for r in result_rows]
        assert len(lease_ids) == len(set(lease_ids))
        assert artifacts == sum(1 for r in result_rows if r.output is not None)


def _drop_postgres_database(admin_url: str) -> Callable[[str], None]:
    def drop(url: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    return drop


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_lifecycle_state_machine(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cleanup: Callable[[str], None]
    if backend == "sqlite":
        template = request.getfixturevalue("sqlite_template")

        def factory() -> str:
            return fresh_sqlite_url(template, tmp_path_factory.mktemp("machine"))

        def remove_file(url: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                Path(url.removeprefix("sqlite:///")).unlink()

        cleanup = remove_file

    else:
        cluster = request.getfixturevalue("postgres")

        def factory() -> str:
            return fresh_postgres_url(cluster)

        cleanup = _drop_postgres_database(cluster.url())

    machine = type(
        "Lifecycle",
        (LifecycleMachine,),
        {"database_factory": staticmethod(factory), "cleanup": staticmethod(cleanup)},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            # PostgreSQL's steps cost ten times SQLite's (a database made per example, and a
            # round trip per statement): half the examples there, the same rules and model
            max_examples=40 if backend == "sqlite" else 20,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
