"""A leased attempt's life: heartbeats while it runs, then one atomic, idempotent complete.

Both are fenced by the lease (`fencing`): they name it (or default to the task's current lease,
as seed clients do), and a lease that expired, was released or was replaced is refused with a
conflict and changes nothing.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, cast

import structlog

from bloom.artifacts import ArtifactStore, StoredContent, StoreUnavailable
from bloom.domain.audit import AuditAction, task_audit, worker_audit
from bloom.domain.budget import Crossing
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, NotFound, ServiceError, Unavailable
from bloom.domain.ids import new_id
from bloom.domain.models import Artifact, Completion, Lease, Result, Task
from bloom.domain.retry import RetryPolicy
from bloom.domain.states import IN_FLIGHT, LeaseStatus, ResultStatus, TaskStatus
from bloom.domain.usage import Usage
from bloom.domain.workspace import PATCH_ARTIFACT
from bloom.runtime.services import approvals, budgets, graphs, metrics
from bloom.runtime.services.attempt_records import (
    attempt_result,
    end_audit,
    next_task_values,
    running_audit,
    stored_artifact,
    success_values,
    usage_limit_reset,
)
from bloom.runtime.services.budgets import HoldReleases
from bloom.runtime.services.events import EventService, NewEvent, Row, prepared, serialise_data
from bloom.runtime.services.fencing import TASK_OR_LEASE_NOT_FOUND, checked, fenced, lapsed
from bloom.runtime.services.leasing import Looked, NextLook
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)
STORE_RETRY_AFTER_SEC = 5
"""A complete refused because the artifact store is down asks to be retried this much later."""


@dataclass(frozen=True, slots=True)
class Beat:
    lease: Lease
    task_status: TaskStatus
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Ending:
    """An attempt's end as its worker reports it, naming the lease it held (default: the
    task's current one)."""

    task_id: str
    completion: Completion
    lease_id: str | None = None
    events: Sequence[Row] = ()
    """The attempt's last events (`events.prepared`), stored with its end; none on a replay."""


@dataclass(frozen=True, slots=True)
class Completed:
    task: Task
    artifact: Artifact | None
    result: Result
    replayed: bool
    next: Looked | None = None
    """The `claim_next` look's outcome (None: not asked, a replay, or refused)."""
    next_refused: str | None = None
    """Why that claim was refused; the complete stands."""


@dataclass(frozen=True, slots=True)
class CompletedMany:
    """`complete_many`'s outcome: each end's, in order (a refusal, when it was refused), then
    the `claim_next` look's as in `Completed`."""

    ends: list[Completed | ServiceError]
    next: Looked | None = None
    next_refused: str | None = None


class _Read(NamedTuple):
    """An end's task and lease as read and checked, whether its lease is now released, and
    then its task as moved on (None: it could not be)."""

    task: Task
    lease: Lease
    released: bool
    finished: Task | None


class _Contents(NamedTuple):
    """An end's contents, in the artifact store before its transaction: the output, and the
    patch of a workspace task's change."""

    output: StoredContent | None
    patch: StoredContent | None


@dataclass(frozen=True, slots=True)
class _Recorded:
    """An end written in a transaction, with what to announce once it commits."""

    completed: Completed
    lease: Lease
    usage: Usage
    passed: list[Crossing]
    events_stored: bool = False
    released: int = 0
    """Tasks its end queued (their last dependency): claims to wake."""


async def _look(
    claim_next: NextLook, tx: Repositories, worker_id: str
) -> tuple[Looked | None, str | None]:
    """`claim_next`'s look in `tx`: its outcome, or why it was refused (before it wrote)."""
    try:
        return await claim_next(tx, worker_id), None
    except ServiceError as exc:
        return None, exc.message


class AttemptService:
    def __init__(
        self,
        db: RuntimeDatabase,
        signal: QueueSignal,
        clock: Clock,
        store: ArtifactStore,
        retry: RetryPolicy,
        releases: HoldReleases,
        events: EventService,
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.store = store
        self.retry = retry
        self.releases = releases
        self.events = events
        """Where a complete's last events go, in its transaction, as the events endpoint's."""

    async def heartbeat(
        self, task_id: str, *, lease_id: str | None = None, worker_id: str | None = None
    ) -> Beat:
        """Extend a live lease; the first heartbeat moves the task from leased to running."""
        now = self.clock()
        if lease_id is not None:
            beat = await self._beat(task_id, lease_id, worker_id, now)
            if beat is not None:
                return beat
        # The lease is not named, or is not live (or, on PostgreSQL, not the caller's): the
        # same in steps, for the seed clients' default and for the refusal's reason.
        async with self.db.write() as tx:
            if lease_id is None:
                task = await tx.tasks.get(task_id)
                if task is None or task.lease_id is None:
                    raise NotFound(TASK_OR_LEASE_NOT_FOUND)
                lease_id = task.lease_id
            renewal = await tx.leases.renew(lease_id, task_id, now)
            if renewal is None or (worker_id is not None and renewal.lease.worker_id != worker_id):
                task, lease = await fenced(tx, task_id, lease_id, worker_id, completing=False)
                raise lapsed(lease, task, now)
            lease, status = renewal.lease, renewal.task_status
            if status == TaskStatus.LEASED:
                running = await tx.tasks.transition(
                    task_id,
                    from_statuses=[TaskStatus.LEASED],
                    lease_id=lease.id,
                    values={"status": TaskStatus.RUNNING, "updated_at": now},
                )
                if running is not None:
                    status = running.status
                    await tx.audit.add(running_audit(task_id, lease, now))
        return Beat(lease, status, renewal.cancel_requested)

    async def _beat(
        self, task_id: str, lease_id: str, worker_id: str | None, now: int
    ) -> Beat | None:
        """PostgreSQL: the heartbeat in one statement that commits alone (`LeaseRepository.beat`);
        None when the lease is not live and the caller's, or on SQLite."""
        if self.db.kind != "postgresql":
            return None
        audit_id = new_id(now)
        async with self.db.single() as tx:
            done = await tx.leases.beat(lease_id, task_id, worker_id, now, audit_id)
            if done is None:
                return None
            renewal, started = done
            lease = renewal.lease
            if started:
                tx.audit.written(replace(running_audit(task_id, lease, now), id=audit_id))
        return Beat(lease, renewal.task_status, renewal.cancel_requested)

    async def complete(
        self,
        task_id: str,
        completion: Completion,
        *,
        lease_id: str | None = None,
        worker_id: str | None = None,
        claim_next: NextLook | None = None,
        events: Sequence[NewEvent] = (),
    ) -> Completed:
        """Record an attempt's end: result, artifact, task status, lease release and audit in one
        transaction. Repeating it for the same lease returns the first outcome unchanged.

        `events`, the attempt's last live output, are stored in that transaction after the
        task's earlier ones (bounded and counted as the events endpoint stores them; fenced by
        the complete's own fence), so that a worker need not post them first; a replay stores
        none again.

        `claim_next` looks for the lease's worker's next task in the same transaction, once the
        complete is written (one commit where there were two); a refusal it raises is told in
        `next_refused`, and the complete stands."""
        ending = Ending(task_id, completion, lease_id, prepared(events))
        stored = await self._stored(completion)
        now = self.clock()
        if claim_next is None:
            alone = await self._end_alone(ending, stored, worker_id, now)
            if alone is not None:
                self._announce([alone], now)
                return alone.completed
        async with self.db.write() as tx:
            recorded = await self._record(
                tx, ending, stored, worker_id, now, lock_worker=claim_next is not None
            )
            if recorded.completed.replayed or claim_next is None:
                following: Looked | None = None
                refused = None
            else:
                following, refused = await _look(claim_next, tx, recorded.lease.worker_id)
        self._announce([recorded], now)
        return replace(recorded.completed, next=following, next_refused=refused)

    async def _end_alone(
        self, ending: Ending, stored: _Contents, worker_id: str | None, now: int
    ) -> _Recorded | None:
        """PostgreSQL: an end that needs no lock and charges no budget, in statements that each
        commit alone: a success naming its lease in one (`_succeed_alone`); else the task and
        the lease read and checked (`fenced`), then every write in one statement whose
        compare-and-sets are the steps' (`EndRepository.end_alone`).
        None when that statement wrote nothing (a replay, or a lease that lapsed meanwhile),
        or for another end: `_record` in a transaction then answers it."""
        completion = ending.completion
        usage = Usage.from_metrics(completion.metrics)
        if (
            self.db.kind != "postgresql"
            or usage_limit_reset(completion, now) is not None
            or (usage.cost_usd is not None and usage.cost_usd > 0)
            or ending.events  # stored under the task's row lock, with its tally
            or stored.patch is not None  # a workspace's end: a second artifact
            or completion.workspace is not None
            or completion.approval is not None  # an approval row too
            or completion.tool_calls  # an audit entry each
        ):
            return None
        if completion.status == ResultStatus.SUCCESS and ending.lease_id is not None:
            # No read needed; when it writes nothing (a replay, a lapsed or foreign lease), the
            # steps answer.
            return await self._succeed_alone(ending, ending.lease_id, stored, worker_id, now)
        async with self.db.single() as tx:
            task, lease = await fenced(
                tx, ending.task_id, ending.lease_id, worker_id, completing=True
            )
            if (
                lease.status != LeaseStatus.ACTIVE
                or task.lease_id != lease.id
                or task.has_dependents
            ):
                # a replay, or a refusal: said by the steps; or its dependents to tell
                return None
            values = next_task_values(task, completion, now, self.retry)
            artifact = stored_artifact(
                task.id, completion.artifact_type, completion.artifact_tags, stored.output, now
            )
            result = attempt_result(
                task.id, (lease.id, lease.worker_id), artifact, completion, usage, now
            )
            not_before = cast("int | None", values.get("not_before"))
            moved = (task.id, TaskStatus(str(values["status"])), not_before)
            entry = end_audit(moved, artifact, completion, lease.worker_id, now)
            finished = await tx.ends.end_alone(
                task.id,
                lease.id,
                now,
                values=values,
                result=result,
                artifact=artifact,
                audit=entry,
            )
            if finished is None:
                return None
            tx.audit.written(entry)
        completed = Completed(finished, artifact, result, replayed=False)
        return _Recorded(completed, lease, usage, [])

    async def _succeed_alone(
        self,
        ending: Ending,
        lease_id: str,
        stored: _Contents,
        worker_id: str | None,
        now: int,
    ) -> _Recorded | None:
        """PostgreSQL: a success naming its lease in one statement, without a read first
        (`EndRepository.succeed_alone`: the fencing is in it); None when it wrote nothing."""
        completion = ending.completion
        task_id = ending.task_id
        values = success_values(completion, now)
        artifact = stored_artifact(
            task_id, completion.artifact_type, completion.artifact_tags, stored.output, now
        )
        actor = worker_id or ""  # the lease's worker, written by the statement
        usage = Usage.from_metrics(completion.metrics)
        result = attempt_result(task_id, (lease_id, actor), artifact, completion, usage, now)
        entry = end_audit((task_id, TaskStatus.COMPLETED, None), artifact, completion, actor, now)
        async with self.db.single() as tx:
            done = await tx.ends.succeed_alone(
                task_id,
                lease_id,
                worker_id,
                now,
                values=values,
                result=result,
                artifact=artifact,
                audit=entry,
            )
            if done is None:
                return None
            finished, lease = done
            entry = replace(entry, actor=lease.worker_id)
            tx.audit.written(entry)
        result = replace(result, worker_id=lease.worker_id)
        return _Recorded(Completed(finished, artifact, result, replayed=False), lease, usage, [])

    async def complete_many(
        self, endings: list[Ending], worker_id: str, *, claim_next: NextLook | None = None
    ) -> CompletedMany:
        """Record several attempts' ends of one worker, and maybe claim its next tasks, in one
        transaction (`complete` for each, then `claim_next`'s look).

        When any of them is refused, nothing of the batch is kept: each is then recorded alone,
        for its own answer, and `claim_next` is left to the caller (`next` is None)."""
        stored = [await self._stored(ending.completion) for ending in endings]
        now = self.clock()
        # Every transaction locks rows in one order: the worker's, then the spend rows it charges
        # by project, then tasks by id.
        order = sorted(range(len(endings)), key=lambda index: endings[index].task_id)
        try:
            async with self.db.write() as tx:
                await tx.workers.lock(worker_id)
                found = await tx.leases.tasks_with_leases(
                    [(endings[index].task_id, endings[index].lease_id) for index in order]
                )
                held = {
                    index: checked(
                        found.get(endings[index].task_id),
                        endings[index].task_id,
                        endings[index].lease_id,
                        worker_id,
                        completing=True,
                    )
                    for index in order
                }
                charged = {
                    held[index][0].agent_slug
                    for index in order
                    if (Usage.from_metrics(endings[index].completion.metrics).cost_usd or 0) > 0
                }
                if len(charged) > 1:  # then, by project, their spend rows
                    await budgets.lock_spend(tx, charged, now)
                released = await tx.leases.end_several(
                    [lease.id for _, lease in held.values()], LeaseStatus.RELEASED, now
                )
                ending_of: dict[int, Lease] = {}  # the ends whose lease they released
                for index in order:
                    lease = held[index][1]
                    if lease.id in released:
                        released.discard(lease.id)  # a lease named twice is ended once
                        ending_of[index] = lease
                finished = await self._transitions(
                    tx, [(*held[index], endings[index]) for index in ending_of], now
                )
                recorded = {}
                for index in order:
                    task, lease = held[index]
                    read = _Read(task, lease, index in ending_of, finished.get(task.id))
                    recorded[index] = await self._record(
                        tx, endings[index], stored[index], worker_id, now, read=read
                    )
                following: Looked | None = None
                refused = None
                if claim_next is not None:
                    following, refused = await _look(claim_next, tx, worker_id)
        except ServiceError as exc:
            if len(endings) == 1:
                return CompletedMany([exc])
            return CompletedMany([await self._alone(ending, worker_id) for ending in endings])
        self._announce(list(recorded.values()), now)
        return CompletedMany(
            [recorded[index].completed for index in range(len(endings))], following, refused
        )

    async def _transitions(
        self, tx: Repositories, ends: list[tuple[Task, Lease, Ending]], now: int
    ) -> dict[str, Task]:
        """The tasks of ends whose leases were released moved on (fenced by those leases), one
        statement for each set of new values (a batch of successes shares one); the tasks
        changed, by id."""
        alike: dict[tuple[tuple[str, object], ...], list[tuple[str, str]]] = {}
        for task, lease, ending in ends:
            values = next_task_values(task, ending.completion, now, self.retry)
            alike.setdefault(tuple(values.items()), []).append((task.id, lease.id))
        finished: dict[str, Task] = {}
        for new_values, fenced_pairs in alike.items():
            finished |= await tx.tasks.transition_several(
                fenced_pairs, from_statuses=IN_FLIGHT, values=dict(new_values)
            )
        return finished

    async def _alone(self, ending: Ending, worker_id: str) -> Completed | ServiceError:
        try:
            return await self.complete(
                ending.task_id, ending.completion, lease_id=ending.lease_id, worker_id=worker_id
            )
        except ServiceError as exc:
            return exc

    async def _record(
        self,
        tx: Repositories,
        ending: Ending,
        stored: _Contents,
        worker_id: str | None,
        now: int,
        *,
        lock_worker: bool = False,
        read: _Read | None = None,
    ) -> _Recorded:
        """One attempt's end written in `tx` (or the first outcome, on a replay); with
        `lock_worker`, the lease's worker's row is locked before anything is written. `read`:
        its task and lease, read and checked (`fencing.checked`), the lease ended or not,
        by the caller (who holds the worker's row lock)."""
        completion = ending.completion
        pause_until = usage_limit_reset(completion, now)
        usage = Usage.from_metrics(completion.metrics)
        if read is None:
            task, lease = await fenced(
                tx, ending.task_id, ending.lease_id, worker_id, completing=True
            )
            if lock_worker or pause_until is not None:
                # The worker's row before the lease and the task: every writer's lock order.
                await tx.workers.lock(lease.worker_id)
            released = await tx.leases.end(lease.id, LeaseStatus.RELEASED, now) is not None
        else:
            task, lease, released, finished = read
            if pause_until is not None:
                await tx.workers.lock(lease.worker_id)
        if not released:
            # Already ended: by this same complete sent before (a replay), or for good.
            replay = await self._replay(tx, lease, completion)
            if replay is not None:
                return _Recorded(replay, lease, usage, [])
            raise lapsed(lease, task, now)
        if read is None:
            finished = await tx.tasks.transition(
                task.id,
                from_statuses=IN_FLIGHT,
                lease_id=lease.id,
                values=next_task_values(task, completion, now, self.retry),
            )
        if finished is None:
            raise lapsed(lease, task, now)  # rolls the lease release back too
        rows = [
            *ending.events,
            *await _asked_and_called(tx, task, finished, lease, completion, now),
        ]
        # Its dependents learn of its end in this same transaction (docs/graphs.md)
        before = len(tx.graphs.released) if finished.has_dependents else 0
        await graphs.ended(tx, finished, now, lease.worker_id)
        # The task's row is locked now (its transition; SQLite: the only writer), as an events
        # post locks it first: its events' tally holds until this commits.
        written = await self.events.write(tx, task.id, lease, rows, now) if rows else None
        artifact = stored_artifact(
            task.id, completion.artifact_type, completion.artifact_tags, stored.output, now
        )
        patch = stored_artifact(task.id, PATCH_ARTIFACT, [], stored.patch, now)
        result = attempt_result(
            task.id, (lease.id, lease.worker_id), artifact, completion, usage, now, patch=patch
        )
        if artifact is not None:
            await tx.artifacts.insert(artifact)
        if patch is not None:
            await tx.artifacts.insert(patch)
        await tx.results.insert(result)
        passed = await budgets.charge(
            tx, finished.agent_slug, usage.cost_usd, now=now, task_id=task.id
        )
        moved = (finished.id, finished.status, finished.not_before)
        await tx.audit.add(end_audit(moved, artifact, completion, lease.worker_id, now))
        if pause_until is not None:
            await tx.workers.pause(lease.worker_id, pause_until)
            await tx.audit.add(
                worker_audit(
                    AuditAction.WORKER_PAUSED,
                    lease.worker_id,
                    now=now,
                    actor=lease.worker_id,
                    detail=f"Usage limit: worker {lease.worker_id} takes no work until "
                    f"{pause_until}",
                    task_id=task.id,
                )
            )
        return _Recorded(
            Completed(finished, artifact, result, replayed=False),
            lease,
            usage,
            passed,
            events_stored=written is not None and written.stored > 0,
            released=len(tx.graphs.released) - before if finished.has_dependents else 0,
        )

    def _announce(self, recorded: list[_Recorded], now: int) -> None:
        """After the commit: wake the claims the ends are for, count them, say what budgets
        they passed."""
        fresh = [entry for entry in recorded if not entry.completed.replayed]
        if not fresh:
            return
        # Slots of the workers came free, and tasks may be back in the queue.
        requeued = sum(entry.completed.task.status == TaskStatus.QUEUED for entry in fresh)
        requeued += sum(entry.released for entry in fresh)
        self.signal.changed(Wake(requeued, frozenset(entry.lease.worker_id for entry in fresh)))
        exhausted = False
        for entry in fresh:
            task = entry.completed.task
            if entry.events_stored:
                self.events.announce(task.id)
            metrics.attempt_ended(task, entry.lease, now)
            metrics.usage_recorded(task, entry.usage)
            budgets.announce(task.agent_slug, entry.passed)
            exhausted |= any(crossing.exhausted for crossing in entry.passed)
        if exhausted:
            self.releases.changed()  # its release timer learns of the new hold

    async def _stored(self, completion: Completion) -> _Contents:
        output = await self._store(completion.output) if completion.output is not None else None
        patch = await self._store(completion.patch) if completion.patch else None
        return _Contents(output, patch)

    async def _store(self, output: str) -> StoredContent:
        """The output in the artifact store before anything is committed: a task is never
        completed with content that cannot be read back."""
        try:
            return await self.store.put(output)
        except StoreUnavailable as exc:
            log.warning("artifact_store_unavailable", error=str(exc))
            raise Unavailable(
                "Artifact store unavailable; retry the complete later",
                retry_after_sec=STORE_RETRY_AFTER_SEC,
            ) from None

    async def _replay(
        self, tx: Repositories, lease: Lease, completion: Completion
    ) -> Completed | None:
        result = await tx.results.get_by_lease(lease.id)
        if result is None:
            return None
        if result.status != completion.status:
            raise Conflict(f"Lease {lease.id} was already completed with status '{result.status}'")
        task = await tx.tasks.get(lease.task_id)
        artifact = await tx.artifacts.get(result.artifact_id) if result.artifact_id else None
        assert task is not None
        return Completed(task, artifact, result, replayed=True)


async def _asked_and_called(
    tx: Repositories, task: Task, finished: Task, lease: Lease, completion: Completion, now: int
) -> list[Row]:
    """An attempt's tool calls audited, one entry each, and the approval it asks for written
    (docs/approvals.md); the event that says so, if it asks for one."""
    for call in completion.tool_calls:
        detail = call.detail()
        await tx.audit.add(
            task_audit(
                AuditAction.TOOL_CALL, task.id, now=now, actor=lease.worker_id, detail=detail
            )
        )
    if finished.status != TaskStatus.AWAITING_APPROVAL or completion.approval is None:
        return []
    approval = approvals.requested(task, lease, completion.approval, now)
    await tx.approvals.insert(approval)
    return [("approval_requested", serialise_data(approval.to_json()))]
