"""A leased attempt's life: heartbeats while it runs, then one atomic, idempotent complete.

Both are fenced by the lease (`fencing`): they name it (or default to the task's current lease,
as seed clients do), and a lease that expired, was released or was replaced is refused with a
conflict and changes nothing.
"""

from dataclasses import dataclass

import structlog

from bloom.artifacts import ArtifactStore, StoredContent, StoreUnavailable
from bloom.domain.audit import AuditAction, task_audit, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, NotFound, ServiceError, Unavailable
from bloom.domain.ids import new_id
from bloom.domain.models import Artifact, Completion, Lease, Result, Task
from bloom.domain.retry import ErrorCode, RetryPolicy, failure_outcome
from bloom.domain.states import IN_FLIGHT, LeaseStatus, ResultStatus, TaskStatus
from bloom.domain.usage import Usage
from bloom.runtime.services import budgets, metrics
from bloom.runtime.services.budgets import HoldReleases
from bloom.runtime.services.fencing import TASK_OR_LEASE_NOT_FOUND, fenced, lapsed
from bloom.runtime.services.leasing import Claimed, Missed, NextLook
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)
STORE_RETRY_AFTER_SEC = 5
"""A complete refused because the artifact store is down asks to be retried this much later."""
FAILURE_ACTIONS = {
    TaskStatus.QUEUED: AuditAction.TASK_RETRY_SCHEDULED,
    TaskStatus.FAILED: AuditAction.TASK_FAILED,
    TaskStatus.DEAD: AuditAction.TASK_DEAD,
    TaskStatus.CANCELLED: AuditAction.TASK_CANCELLED,
}


@dataclass(frozen=True, slots=True)
class Beat:
    lease: Lease
    task_status: TaskStatus
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Completed:
    task: Task
    artifact: Artifact | None
    result: Result
    replayed: bool
    next: Claimed | Missed | None = None
    """The `claim_next` look's outcome (None: not asked, a replay, or refused)."""
    next_refused: str | None = None
    """Why that claim was refused; the complete stands."""


def _usage_limit_reset(completion: Completion, now: int) -> int | None:
    """When a usage limit stopped the attempt: the reset time, before which its worker pauses."""
    if (
        completion.status == ResultStatus.ERROR
        and completion.error_code == ErrorCode.USAGE_LIMIT
        and completion.retry_at is not None
        and completion.retry_at > now
    ):
        return completion.retry_at
    return None


class AttemptService:
    def __init__(
        self,
        db: RuntimeDatabase,
        signal: QueueSignal,
        clock: Clock,
        store: ArtifactStore,
        retry: RetryPolicy,
        releases: HoldReleases,
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.store = store
        self.retry = retry
        self.releases = releases

    async def heartbeat(
        self, task_id: str, *, lease_id: str | None = None, worker_id: str | None = None
    ) -> Beat:
        """Extend a live lease; the first heartbeat moves the task from leased to running."""
        now = self.clock()
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
                    await tx.audit.add(
                        task_audit(
                            AuditAction.TASK_RUNNING,
                            task_id,
                            now=now,
                            actor=lease.worker_id,
                            detail=f"Worker {lease.worker_id} started lease {lease.id}",
                        )
                    )
        return Beat(lease, status, renewal.cancel_requested)

    async def complete(
        self,
        task_id: str,
        completion: Completion,
        *,
        lease_id: str | None = None,
        worker_id: str | None = None,
        claim_next: NextLook | None = None,
    ) -> Completed:
        """Record an attempt's end: result, artifact, task status, lease release and audit in one
        transaction. Repeating it for the same lease returns the first outcome unchanged.

        `claim_next` looks for the lease's worker's next task in the same transaction, once the
        complete is written (one commit where there were two); a refusal it raises is told in
        `next_refused`, and the complete stands."""
        stored = await self._store(completion.output) if completion.output is not None else None
        now = self.clock()
        pause_until = _usage_limit_reset(completion, now)
        following: Claimed | Missed | None = None
        refused: str | None = None
        async with self.db.write() as tx:
            task, lease = await fenced(tx, task_id, lease_id, worker_id, completing=True)
            if pause_until is not None or claim_next is not None:
                # The worker's row before the lease and the task: every writer's lock order.
                await tx.workers.lock(lease.worker_id)
            released = await tx.leases.end(lease.id, LeaseStatus.RELEASED, now)
            if released is None:
                # Already ended: by this same complete sent before (a replay), or for good.
                replay = await self._replay(tx, lease, completion)
                if replay is not None:
                    return replay
                raise lapsed(lease, task, now)
            finished = await tx.tasks.transition(
                task.id,
                from_statuses=IN_FLIGHT,
                lease_id=lease.id,
                values=self._next_task_values(task, completion, now),
            )
            if finished is None:
                raise lapsed(lease, task, now)  # rolls the lease release back too
            artifact = self._artifact(task.id, completion, stored, now)
            usage = Usage.from_metrics(completion.metrics)
            result = Result(
                id=new_id(now),
                task_id=task.id,
                worker_id=lease.worker_id,
                artifact_id=artifact.id if artifact else None,
                status=completion.status,
                output=completion.output,
                error_message=completion.error_message,
                metrics=completion.metrics,
                completed_at=now,
                lease_id=lease.id,
                error_code=completion.error_code,
                **usage.columns(),
            )
            if artifact is not None:
                await tx.artifacts.insert(artifact)
            await tx.results.insert(result)
            passed = await budgets.charge(
                tx, finished.agent_slug, usage.cost_usd, now=now, task_id=task.id
            )
            await self._audit(tx, finished, artifact, completion, lease, now)
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
            if claim_next is not None:
                try:
                    following = await claim_next(tx, lease.worker_id)
                except ServiceError as exc:  # raised before it wrote anything
                    refused = exc.message
        # A slot of the worker's came free, and the task may be back in the queue.
        requeued = int(finished.status == TaskStatus.QUEUED)
        self.signal.changed(Wake(requeued, frozenset({lease.worker_id})))
        metrics.attempt_ended(finished.status, lease, now)
        metrics.usage_recorded(finished.agent_slug, usage)
        budgets.announce(finished.agent_slug, passed)
        if any(crossing.exhausted for crossing in passed):
            self.releases.changed()  # its release timer learns of the new hold
        return Completed(
            finished, artifact, result, replayed=False, next=following, next_refused=refused
        )

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

    def _next_task_values(self, task: Task, completion: Completion, now: int) -> dict[str, object]:
        values: dict[str, object] = {"updated_at": now}
        if completion.session_id:
            values["session_id"] = completion.session_id
        if completion.status == ResultStatus.SUCCESS:
            return values | {"status": TaskStatus.COMPLETED, "last_error": None}
        outcome = failure_outcome(
            ErrorCode(completion.error_code or ErrorCode.ERROR),
            attempts=task.attempts,
            max_attempts=task.max_attempts,
            now=now,
            retry_at=completion.retry_at,
            cancel_requested=task.cancel_requested,
            policy=self.retry,
        )
        values |= {"status": outcome.status, "last_error": completion.error_message}
        if outcome.status == TaskStatus.QUEUED:
            values |= {
                "lease_id": None,
                "worker_id": None,
                "queued_at": now,
                "not_before": outcome.not_before,
                "attempts": task.attempts - 1 if outcome.refund_attempt else task.attempts,
            }
        return values

    @staticmethod
    def _artifact(
        task_id: str, completion: Completion, stored: StoredContent | None, now: int
    ) -> Artifact | None:
        if stored is None:
            return None
        return Artifact(
            id=new_id(now),
            task_id=task_id,
            job_id=None,
            type=completion.artifact_type,
            created_at=now,
            finalized=True,
            url=stored.url,
            entity_refs=[],
            tags=completion.artifact_tags,
            content=stored.content,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            storage=stored.storage,
        )

    @staticmethod
    async def _audit(
        tx: Repositories,
        task: Task,
        artifact: Artifact | None,
        completion: Completion,
        lease: Lease,
        now: int,
    ) -> None:
        duration = completion.metrics.get("duration_ms")
        detail = (
            f"Status: {completion.status}, artifact: {artifact.id if artifact else None}, "
            f"duration: {duration}ms"
        )
        actor = lease.worker_id
        await tx.audit.add(
            task_audit(AuditAction.TASK_COMPLETED, task.id, now=now, actor=actor, detail=detail)
        )
        if task.status in FAILURE_ACTIONS:
            code = completion.error_code or ErrorCode.ERROR
            next_detail = f"{code}: {completion.error_message}"
            if task.not_before:
                next_detail += f"; retry not before {task.not_before}"
            await tx.audit.add(
                task_audit(
                    FAILURE_ACTIONS[task.status], task.id, now=now, actor=actor, detail=next_detail
                )
            )
