"""Reaping lost leases: the reaper's pass, and returning a task whose lease is gone to the queue.

The same pass notices stalled runs (`bloom.domain.stall`): live leases whose CLI has printed
nothing for longer than their task's `stall_sec`. Each is marked (`stalled_at`), audited and
counted once; under `on_stall: retry` its lease also ends (failed) and its task goes back as a
lost lease's does, the attempt counted, so the worker's next heartbeat is refused (409) and it
stops its CLI."""

import structlog

from bloom.domain.audit import AuditAction, lease_audit, leases_audit, task_audit, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.models import Lease, Task
from bloom.domain.retry import expiry_outcome
from bloom.domain.stall import DEFAULT_STALL_SEC, OnStall, StallPolicy, is_stalled, silence
from bloom.domain.states import IN_FLIGHT, TaskStatus
from bloom.runtime.services import graphs, metrics
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)

REAPER_LOCK_KEY = 0x626C6F6F6D01  # one reaper pass at a time across replicas
LOST_LEASE_ACTIONS = {
    TaskStatus.QUEUED: AuditAction.TASK_REQUEUED,
    TaskStatus.DEAD: AuditAction.TASK_DEAD,
    TaskStatus.CANCELLED: AuditAction.TASK_CANCELLED,
}


async def release_task_of_lost_lease(
    tx: Repositories, lease: Lease, now: int, *, actor: str, reason: str
) -> Task | None:
    """After `lease` ended without a result: requeue its task, or end it as dead (attempts spent)
    or cancelled (cancel requested). Does nothing if the task has moved on from this lease."""
    task = await tx.tasks.get(lease.task_id)
    if task is None or task.lease_id != lease.id or task.status not in IN_FLIGHT:
        return None
    next_status = expiry_outcome(
        attempts=task.attempts,
        max_attempts=task.max_attempts,
        cancel_requested=task.cancel_requested,
    )
    values: dict[str, object] = {"status": next_status, "updated_at": now}
    if next_status == TaskStatus.QUEUED:
        values |= {"lease_id": None, "worker_id": None, "queued_at": now, "not_before": None}
    updated = await tx.tasks.transition(
        task.id, from_statuses=IN_FLIGHT, lease_id=lease.id, values=values
    )
    if updated is not None:
        await tx.audit.add(
            task_audit(
                LOST_LEASE_ACTIONS[next_status],
                task.id,
                now=now,
                actor=actor,
                detail=f"{reason} (worker {lease.worker_id}, "
                f"attempt {task.attempts}/{task.max_attempts})",
            )
        )
        await graphs.ended(tx, updated, now, actor)
    return updated


async def renew_after_outage(tx: Repositories, now: int) -> int:
    """Give every active lease a full TTL from now. Run at start and when the database is back
    (`Database.recovery`): while we could not be reached no worker could heartbeat, and a
    worker that kept working must not lose its task for our outage. A worker that really died
    is still found, one TTL later."""
    renewed = await tx.leases.renew_all(now)
    if renewed:
        log.info("leases_renewed_after_outage", count=renewed)
        await tx.audit.add(
            leases_audit(
                AuditAction.LEASES_RENEWED,
                now=now,
                actor="runtime",
                detail=f"{renewed} active lease(s) given a full TTL: the runtime or its "
                "database was unreachable, so their workers could not heartbeat",
            )
        )
    return renewed


class LeaseReaper:
    """Expires overdue leases and returns their tasks. Each pass is one transaction, and on
    PostgreSQL an advisory lock keeps passes of several replicas from overlapping."""

    def __init__(
        self,
        db: RuntimeDatabase,
        signal: QueueSignal,
        clock: Clock,
        batch: int = 500,
        stall_sec: int = DEFAULT_STALL_SEC,
    ):
        """`stall_sec`: a run's silence that stalls it when its policy does not say (0: none)."""
        self.db = db
        self.signal = signal
        self.clock = clock
        self.batch = batch
        self.stall_sec = stall_sec

    async def reap_once(self) -> int:
        """Expire up to one batch of overdue leases, and notice up to one batch of stalled
        runs; returns how many leases expired."""
        now = self.clock()
        lapsed: list[Lease] = []
        outcomes: list[TaskStatus | None] = []
        stalls: list[OnStall] = []
        async with self.db.write() as tx:
            if not await tx.try_singleton_lock(REAPER_LOCK_KEY):
                return 0
            for lease_id in await tx.leases.overdue_ids(now, self.batch):
                lease = await tx.leases.expire(lease_id, now)
                if lease is None:  # renewed or ended since we listed it
                    continue
                lapsed.append(lease)
                await tx.audit.add(
                    lease_audit(
                        AuditAction.LEASE_EXPIRED,
                        lease,
                        now=now,
                        actor="reaper",
                        detail=f"Lease of task {lease.task_id} on worker {lease.worker_id} expired",
                    )
                )
                released = await release_task_of_lost_lease(
                    tx, lease, now, actor="reaper", reason="Lease expired"
                )
                outcomes.append(released.status if released is not None else None)
            stalls = await self._notice_stalls(tx, now)
        for outcome in outcomes:
            metrics.lease_reaped(outcome)
        for action in stalls:
            metrics.run_stalled(action)
        if lapsed:
            await self._mark_silent_workers(lapsed, now)
        # the tasks back in the queue (a retried stall's may be dead: a claim looks in vain)
        requeued = outcomes.count(TaskStatus.QUEUED) + stalls.count(OnStall.RETRY)
        requeued += len(tx.released)  # dependents of the tasks it ended
        if requeued:
            self.signal.changed(Wake(requeued))
        return len(lapsed)

    async def _notice_stalls(self, tx: Repositories, now: int) -> list[OnStall]:
        """Mark, audit and (`on_stall: retry`) stop the runs found stalled; what was done to
        each."""
        noticed: list[OnStall] = []
        for silent in await tx.stalls.silent(now, self.stall_sec, self.batch):
            policy = StallPolicy.of(silent.policy, self.stall_sec)
            if not is_stalled(now, silent.since, policy):  # the query's rule, as the domain says
                continue
            stop = policy.on_stall is OnStall.RETRY
            lease = await tx.stalls.mark_stalled(silent.lease.id, now, stop=stop)
            if lease is None:  # ended or renewed away since we listed it
                continue
            quiet = silence(now - silent.since)
            done = "its attempt is stopped and the task retried" if stop else "flagged"
            await tx.audit.add(
                task_audit(
                    AuditAction.TASK_STALLED,
                    lease.task_id,
                    now=now,
                    actor="reaper",
                    detail=f"Worker {lease.worker_id} has printed nothing for {quiet} on lease "
                    f"{lease.id} while its heartbeats go on (stall_sec {policy.stall_sec}): "
                    f"{done}",
                )
            )
            if stop:
                await release_task_of_lost_lease(
                    tx, lease, now, actor="reaper", reason=f"Stalled: no output for {quiet}"
                )
            noticed.append(policy.on_stall)
        return noticed

    async def _mark_silent_workers(self, lapsed: list[Lease], now: int) -> None:
        """A worker silent since its lapsed lease's last heartbeat is presumed gone: offline
        until its next claim or registration, so it gets no pushed leases and holds no
        context's tasks for itself. A transaction of its own, after the leases': every other
        writer that locks a worker row does so before touching leases."""
        async with self.db.write() as tx:
            for lease in sorted(lapsed, key=lambda lease: lease.worker_id):  # one lock order
                if await tx.workers.mark_gone(lease.worker_id, lease.last_heartbeat):
                    await tx.audit.add(
                        worker_audit(
                            AuditAction.WORKER_OFFLINE,
                            lease.worker_id,
                            now=now,
                            actor="reaper",
                            detail=f"Worker {lease.worker_id} silent since its lease {lease.id} "
                            "lapsed",
                        )
                    )

    async def next_expiry(self) -> int | None:
        """When the earliest active lease expires (epoch ms), if any."""
        async with self.db.read() as tx:
            return await tx.leases.next_expiry()
