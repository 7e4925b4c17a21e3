"""Granting leases: the seed's push-style `lease` and the worker's long-polling `claim`.

Every grant runs in one write transaction that first locks the worker's row, then counts the
worker's active leases, then compare-and-sets the task from `queued` to `leased`. So two grants
can never take the same task, and no worker is ever given more than `max_concurrency` leases.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import structlog

from bloom.domain.audit import AuditAction, lease_audit
from bloom.domain.claims import Missed, missed_at_a_glance
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, NotFound
from bloom.domain.ids import new_id, retimed
from bloom.domain.long_poll import claim_deadline
from bloom.domain.models import AuditEntry, Lease, Task, Worker
from bloom.domain.states import LeaseStatus, TaskStatus, WorkerStatus
from bloom.runtime.services import graphs, metrics
from bloom.runtime.services.budgets import Hold, hold_message
from bloom.runtime.services.signals import QueueSignal, Wake, wait_for_any
from bloom.runtime.services.slots import reserve_slot
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    ttl_sec: int = 300
    claim_wait_sec: float = 25.0
    claim_ack_sec: int = 30
    claim_recheck_sec: float = 2.0
    sticky_wait_ms: int = 30_000
    worker_live_ms: int = 60_000

    def keeping(self, now: int) -> dict[str, int]:
        """Who keeps a context's next task at `now`: the cutoffs `KeeperRepository` takes."""
        return {
            "now": now,
            "sticky_cutoff": now - self.sticky_wait_ms,
            "live_cutoff": now - self.worker_live_ms,
        }


MAX_RECHECKED = 500
"""The most ready tasks the periodic recheck weighs: enough for every claim it could wake."""


async def wake_for(
    tx: Repositories, settings: LeaseSettings, now: int, task_ids: list[str]
) -> Wake:
    """Whom tasks just queued (or queued again) must wake: the claims of their keepers, and a
    counted claim for each task nobody keeps (`keepers`). Waking a counted claim for a kept task
    would wake one that finds nothing, and leave the keeper asleep: the task then waited for the
    recheck (issue 31: seconds at 2,000 waiting workers)."""
    if not task_ids:
        return Wake(0)
    return Wake.for_tasks(await tx.keepers.of_tasks(task_ids, **settings.keeping(now)))


@dataclass(frozen=True, slots=True)
class Claimed:
    lease: Lease
    task: Task


Looked = tuple[Claimed, ...] | Missed
"""A look's outcome: its grants (at least one), or why there was none."""
NextLook = Callable[[Repositories, str], Awaitable[Looked]]
"""A look for a worker's next tasks, run in a transaction someone else opened (`look_many`)."""


class LeaseService:
    def __init__(
        self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock, settings: LeaseSettings
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.settings = settings
        self._seen: set[str] = set()
        """Workers whose claims found nothing at a glance since `note_seen` last ran."""
        self._quiet_since: int | None = None
        """The signal's wakes when a look last began that then found nothing: while no wake
        came since, a claim's first look is likely to find nothing too (`_first_look`)."""

    async def lease(
        self,
        task_id: str,
        *,
        worker_id: str | None = None,
        ttl_sec: int | None = None,
        pushed: bool = False,
        actor: str | None = None,
    ) -> tuple[Lease, Worker]:
        """Lease a queued task to `worker_id`, or to the worker `pick_worker` chooses, audited
        as `actor`'s (the seed's "router" when None).

        `pushed`: the runtime hands it to the worker's agent itself (dispatch), so only a worker
        with an agent URL may take it, and it is delivered already: no claim ever hands it out
        again."""
        now = self.clock()
        ttl = ttl_sec or self.settings.ttl_sec
        async with self.db.write() as tx:
            task = await tx.tasks.get(task_id)
            if task is None:
                raise NotFound("Task not found")
            if task.status != TaskStatus.QUEUED:
                raise Conflict(f"Task status is '{task.status}', expected 'queued'")
            budget = await tx.budgets.get(task.agent_slug)
            held = budget.hold_at(now) if budget is not None else None
            if held is not None:
                raise Conflict(hold_message(Hold(task.agent_slug, held)))
            worker = await reserve_slot(tx, task, worker_id, now, need_url=pushed)
            lease = Lease(
                id=new_id(now),
                task_id=task.id,
                worker_id=worker.id,
                started_at=now,
                expires_at=now + ttl * 1000,
                ttl_seconds=ttl,
                status=LeaseStatus.ACTIVE,
                last_heartbeat=now,
                context_id=task.context_id,
                claimed_at=now if pushed else None,
            )
            leased = await tx.tasks.lease_queued(
                task.id, lease_id=lease.id, worker_id=worker.id, now=now
            )
            if leased is None:
                raise Conflict("Task status changed while leasing; expected 'queued'")
            await self._record_grant(tx, task, lease, now, actor=actor or "router")
        self.signal.changed(Wake(0, frozenset({worker.id})))  # its waiting claim takes the lease
        return lease, replace(worker, active_leases=worker.active_leases + 1)

    async def granted(self, worker_id: str, lease_id: str) -> Claimed:
        """The active lease `lease_id` of `worker_id`, with its task as the runtime holds it: what
        a node runs when the runtime dispatched to it. The node fetches it with its own
        credential; nothing of the request that told it to run is trusted (docs/security.md)."""
        async with self.db.read() as tx:
            lease = await tx.leases.get(lease_id)
            if lease is None or lease.worker_id != worker_id:
                raise NotFound(f"Worker {worker_id} holds no lease {lease_id}")
            if lease.status != LeaseStatus.ACTIVE:
                raise Conflict(f"Lease {lease_id} is {lease.status}, not active")
            task = await tx.tasks.get(lease.task_id)
            if task is None or task.lease_id != lease.id:
                raise Conflict(f"Lease {lease_id} no longer holds its task")
            return Claimed(lease, await graphs.with_answers(tx, task))

    @staticmethod
    async def _record_grant(
        tx: Repositories, task: Task, lease: Lease, now: int, *, actor: str
    ) -> None:
        await tx.leases.insert(lease)
        metrics.granted(task, now)
        await tx.audit.add(_grant_audit(lease, now, actor=actor))

    async def claim(
        self,
        worker_id: str,
        *,
        wait_sec: float | None = None,
        ttl_sec: int | None = None,
        gone: asyncio.Event | None = None,
    ) -> Claimed | None:
        """Long-poll for work: a lease already assigned to the worker, else the best queued task
        it may run. Waits up to `wait_sec` (default: the configured claim wait; at least half of
        it, on the worker's phase: `claim_deadline`), waking as soon as work may have appeared;
        stops as soon as `gone` is set, its caller having hung up (so no lease goes to a closed
        connection)."""
        if wait_sec is None:
            wait_sec = self.settings.claim_wait_sec
        started, now = time.monotonic(), self.clock()
        # spread over time: a fleet's claims that began together must not all come back together
        deadline = started + (claim_deadline(now, int(wait_sec * 1000), worker_id) - now) / 1000
        first = woken = able = True
        while True:
            with self.signal.waiting(worker_id, able=able) as waiter:
                if woken:
                    wakes = self.signal.wakes
                    looked: Claimed | Missed | None = None
                    if first and self._quiet_since == wakes:
                        looked = await self._first_look(worker_id)
                    if looked is None:
                        looked = await self._try_claim(worker_id, ttl_sec, touch=first)
                    if looked is Missed.NOTHING:
                        self._quiet_since = wakes
                    claimed = (
                        await self._deliverable(looked) if isinstance(looked, Claimed) else None
                    )
                    if claimed is not None:
                        if not first:
                            self.signal.passed_on()
                        metrics.claim_answered(True, time.monotonic() - started)
                        return claimed
                    first = False
                    able = looked is not Missed.UNABLE
                remaining = deadline - time.monotonic()
                ending = remaining <= 0 or (gone is not None and gone.is_set())
                if not ending:
                    # Woken by a change or by `wake_if_ready`, or the caller hung up; nothing
                    # else wakes a waiting claim before its end. Woken as the wait ran out
                    # still counts: it looks once more.
                    await wait_for_any((waiter,) if gone is None else (waiter, gone), remaining)
                    woken = waiter.is_set()
                    ending = gone is not None and gone.is_set()
            if ending:
                if waiter.is_set():  # woken for work it will not look for: the next one looks
                    self.signal.passed_on()
                metrics.claim_answered(False, time.monotonic() - started)
                return None

    async def wake_if_ready(self) -> None:
        """Wake this process's waiting claims for work that no change announced: a backoff that
        ended, a sticky wait that ran out, another process's notification that was lost. One
        read for the whole process every `claim_recheck_sec`, instead of each waiting claim
        looking again (2,000 waiting claims looked 1,000 times a second); and it wakes only the
        claims the work is for, as a change would (`wake_for`): waking all 2,000 for one task
        ran 2,000 transactions, every recheck, for as long as the task was kept for a worker."""
        waiters = self.signal.waiters
        if not waiters:
            return
        async with self.db.read() as tx:
            now = self.clock()
            limit = min(waiters, MAX_RECHECKED)
            keepers = await tx.keepers.of_ready(**self.settings.keeping(now), limit=limit)
            undelivered = await tx.keepers.awaiting_delivery(limit)
        wake = Wake.for_tasks(keepers) | Wake(0, frozenset(undelivered))
        if wake.count or wake.workers:
            self.signal.wake(wake)

    async def _deliverable(self, claimed: Claimed) -> Claimed | None:
        """The grant as it may be sent now: with at least half the acknowledgement window left
        for the worker's first heartbeat (an overloaded server can take long between committing
        a grant and answering with it), or None when its lease lapsed meanwhile, so that no
        worker is ever handed a lease that may already be another's."""
        now = self.clock()
        window_ms = self.settings.claim_ack_sec * 1000
        if claimed.lease.expires_at - now >= window_ms // 2:
            return claimed
        async with self.db.write() as tx:
            lease = await tx.leases.hold_for_delivery(claimed.lease.id, now, now + window_ms)
        if lease is None:
            log.warning(
                "grant_lapsed_before_delivery",
                task_id=claimed.task.id,
                lease_id=claimed.lease.id,
                worker_id=claimed.lease.worker_id,
            )
            return None
        return Claimed(lease, claimed.task)

    async def _first_look(self, worker_id: str) -> Missed | None:
        """A claim's first look while the queue seems quiet, a read first: an idle fleet's
        claims find nothing, and each would otherwise lock its worker's row and commit a write
        to say it was seen (issue 31: 100 claims a second at 2,000 waiting workers). The sign
        of life is then written with others' (`note_seen`). None: the read cannot tell, the
        look must be made. (After a wake the look is made at once: the read would be a round
        trip more for a claim that finds work.)"""
        now = self.clock()
        async with self.db.read() as tx:
            glance = await tx.workers.glance(worker_id, now)
        missed = missed_at_a_glance(glance, now)
        if missed is not None:
            self._seen.add(worker_id)
        return missed

    async def note_seen(self) -> None:
        """Write the signs of life of the claims that found nothing at a glance: one statement
        for all of them, every second (the `claims-seen` loop)."""
        if not self._seen:
            return
        seen, self._seen = sorted(self._seen), set()
        async with self.db.single() as tx:
            await tx.workers.seen(seen, self.clock())

    async def _try_claim(
        self, worker_id: str, ttl_sec: int | None, *, touch: bool
    ) -> Claimed | Missed:
        async with self.db.write() as tx:
            looked = await self.look_many(tx, worker_id, ttl_sec, 1, touch=touch)
        return looked[0] if isinstance(looked, tuple) else looked

    async def look_many(
        self,
        tx: Repositories,
        worker_id: str,
        ttl_sec: int | None,
        max_tasks: int,
        *,
        touch: bool = True,
    ) -> Looked:
        """One look at the queue for the worker, in the caller's write transaction: up to
        `max_tasks` grants (leases pushed to it awaiting delivery first, then the best queued
        tasks it may take), or why there is none. It locks the worker's row first, so nothing
        else is granted to it meanwhile; with `touch`, the look is a sign of life."""
        now = self.clock()
        ttl = ttl_sec or self.settings.ttl_sec
        checked_in = await tx.workers.check_in(worker_id, now, touch=touch)
        if checked_in is None:
            raise NotFound("Worker not found")
        worker, has_assigned = checked_in
        tx.tasks.walking()  # the check-in set the claim's plan setting (PostgreSQL)
        if not worker.claude_cli:
            raise Conflict(f"Worker '{worker_id}' does not run Claude CLI tasks")
        if worker.status != WorkerStatus.ONLINE or not worker.ready:
            return Missed.UNABLE  # offline, or says it cannot run Claude (no credentials)
        if worker.paused_until is not None and worker.paused_until > now:
            return Missed.UNABLE  # a usage limit: no work, not even a pushed lease, until then
        grants: list[Claimed] = []
        while has_assigned and len(grants) < max_tasks:  # leases pushed to it, first
            assigned = await tx.leases.deliver_assigned(worker_id, now)
            if assigned is None:
                break
            task = await tx.tasks.get(assigned.task_id)
            assert task is not None, "an active lease always has its task"
            grants.append(Claimed(assigned, await graphs.with_answers(tx, task)))
        # Its free slots as counted before the lock (the claim statement counts again)
        free = worker.max_concurrency - worker.active_leases
        wanted = min(max_tasks - len(grants), free)
        if wanted > 0:
            grants += await self._grant_queued(
                tx, worker_id, worker.max_concurrency, wanted, ttl, now
            )
        if grants:
            return tuple(grants)
        return Missed.UNABLE if free <= 0 else Missed.NOTHING

    async def _grant_queued(
        self, tx: Repositories, worker_id: str, capacity: int, count: int, ttl: int, now: int
    ) -> list[Claimed]:
        """Lease up to `count` of the best queued tasks the worker may take (its row locked)."""
        window_ms = min(ttl, self.settings.claim_ack_sec) * 1000
        audit_id = new_id(now)  # a written grant's, moved to its time if later (`retimed`)
        cutoffs = {
            "now": now,
            "sticky_cutoff": now - self.settings.sticky_wait_ms,
            "live_cutoff": now - self.settings.worker_live_ms,
        }
        written = tx.kind == "postgresql" and count == 1
        if written:  # one task: its lease and audit entry in the claim's statement
            claimed = await tx.tasks.claim_granting(
                worker_id=worker_id,
                capacity=capacity,
                lease_id=new_id(now),
                ttl_sec=ttl,
                window_ms=window_ms,
                audit_id=audit_id,
                detail_tail=_grant_detail_tail(worker_id, ttl),
                **cutoffs,
            )
            tasks = [claimed] if claimed is not None else []
        else:
            tasks = await tx.tasks.claim_several(
                worker_id=worker_id,
                capacity=capacity,
                lease_ids=[new_id(now) for _ in range(count)],
                **cutoffs,
            )
        grants: list[Claimed] = []
        for task in tasks:
            assert task.lease_id is not None, "a claimed task names its lease"
            # Our clock was read before the task's creator committed, possibly a millisecond
            # before its own reading: never record a grant as older than what it granted.
            granted_at = max(now, task.queued_at or task.created_at)
            lease = Lease(
                id=task.lease_id,
                task_id=task.id,
                worker_id=worker_id,
                started_at=granted_at,
                # Until the worker's first heartbeat confirms it got the task, the lease is
                # short: a claim response lost on the wire costs seconds, not a whole TTL.
                expires_at=granted_at + window_ms,
                ttl_seconds=ttl,
                status=LeaseStatus.ACTIVE,
                last_heartbeat=granted_at,
                context_id=task.context_id,
                claimed_at=granted_at,
            )
            if written:
                entry = _grant_audit(lease, granted_at, actor=worker_id)
                tx.audit.written(replace(entry, id=retimed(audit_id, granted_at)))
                metrics.granted(task, granted_at)
            else:
                await self._record_grant(tx, task, lease, granted_at, actor=worker_id)
            # a dependent gets its dependencies' answers before its prompt (docs/graphs.md)
            grants.append(Claimed(lease, await graphs.with_answers(tx, task)))
        return grants

    def next_look(self, ttl_sec: int | None, max_tasks: int = 1) -> NextLook:
        """The first look of a claim (`look_many`) for another use case's transaction: a
        complete's `claim_next`."""

        async def first_look(tx: Repositories, worker_id: str) -> Looked:
            return await self.look_many(tx, worker_id, ttl_sec, max_tasks)

        return first_look

    async def follow_up(
        self,
        looked: Looked | None,
        worker_id: str,
        *,
        wait_sec: float | None,
        ttl_sec: int | None = None,
        gone: asyncio.Event | None = None,
    ) -> list[Claimed]:
        """The answer of a claim whose first look ran in another transaction (a complete's
        `claim_next`; None: it did not run): its grants as they may be sent now; else the claim
        goes on as `claim` would, for the rest of its wait (for one task)."""
        if isinstance(looked, tuple):
            delivered = [
                grant
                for claimed in looked
                if (grant := await self._deliverable(claimed)) is not None
            ]
            if delivered:
                metrics.claim_answered(True, 0.0)
                return delivered
        elif looked is not None and wait_sec == 0:
            metrics.claim_answered(False, 0.0)
            return []
        claimed = await self.claim(worker_id, wait_sec=wait_sec, ttl_sec=ttl_sec, gone=gone)
        return [claimed] if claimed is not None else []


def _grant_detail_tail(worker_id: str, ttl_sec: int) -> str:
    """A grant's audit detail after `Task <id>` (`_CLAIM_GRANTING` writes the same)."""
    return f" leased to worker {worker_id}, TTL {ttl_sec}s"


def _grant_audit(lease: Lease, now: int, *, actor: str) -> AuditEntry:
    return lease_audit(
        AuditAction.TASK_LEASED,
        lease,
        now=now,
        actor=actor,
        detail=f"Task {lease.task_id}" + _grant_detail_tail(lease.worker_id, lease.ttl_seconds),
    )
