"""What an attempt's heartbeat and end write, composed from what its worker reported: the task's
new values, the result, the artifacts and the audit entries. Pure, with the time passed in; the
`AttemptService` decides where and in which statements they are written."""

from bloom.artifacts import StoredContent
from bloom.domain.audit import AuditAction, task_audit
from bloom.domain.clock import utc_text
from bloom.domain.ids import new_id
from bloom.domain.models import Artifact, AuditEntry, Completion, Lease, Result, Task
from bloom.domain.retry import ErrorCode, RetryPolicy, failure_outcome
from bloom.domain.states import ResultStatus, TaskStatus
from bloom.domain.usage import Usage

FAILURE_ACTIONS = {
    TaskStatus.QUEUED: AuditAction.TASK_RETRY_SCHEDULED,
    TaskStatus.FAILED: AuditAction.TASK_FAILED,
    TaskStatus.DEAD: AuditAction.TASK_DEAD,
    TaskStatus.CANCELLED: AuditAction.TASK_CANCELLED,
    TaskStatus.AWAITING_APPROVAL: AuditAction.APPROVAL_REQUESTED,
}


def running_audit(task_id: str, lease: Lease, now: int) -> AuditEntry:
    """The entry of a first heartbeat, which moved the task from leased to running."""
    return task_audit(
        AuditAction.TASK_RUNNING,
        task_id,
        now=now,
        actor=lease.worker_id,
        detail=f"Worker {lease.worker_id} started lease {lease.id}",
    )


def usage_limit_reset(completion: Completion, now: int) -> int | None:
    """When a usage limit stopped the attempt: the reset time, before which its worker pauses."""
    if (
        completion.status == ResultStatus.ERROR
        and completion.error_code == ErrorCode.USAGE_LIMIT
        and completion.retry_at is not None
        and completion.retry_at > now
    ):
        return completion.retry_at
    return None


def success_values(completion: Completion, now: int) -> dict[str, object]:
    """A success's new task values (a failure's start from them)."""
    values: dict[str, object] = {"updated_at": now}
    if completion.session_id:
        values["session_id"] = completion.session_id
    return values | {"status": TaskStatus.COMPLETED, "last_error": None}


def next_task_values(
    task: Task, completion: Completion, now: int, retry: RetryPolicy
) -> dict[str, object]:
    """The task's new values after the attempt: completed, or what `retry` makes of a failure
    (queued again, maybe after a backoff; failed; dead; cancelled; awaiting an approval)."""
    values = success_values(completion, now)
    if completion.status == ResultStatus.SUCCESS:
        return values
    del values["status"], values["last_error"]
    outcome = failure_outcome(
        ErrorCode(completion.error_code or ErrorCode.ERROR),
        attempts=task.attempts,
        max_attempts=task.max_attempts,
        now=now,
        retry_at=completion.retry_at,
        cancel_requested=task.cancel_requested,
        policy=retry,
    )
    values |= {"status": outcome.status, "last_error": completion.error_message}
    if outcome.status in (TaskStatus.QUEUED, TaskStatus.AWAITING_APPROVAL):
        values |= {
            "lease_id": None,
            "worker_id": None,
            "queued_at": now,
            "not_before": outcome.not_before,
            "attempts": task.attempts - 1 if outcome.refund_attempt else task.attempts,
        }
    return values


def stored_artifact(
    task_id: str, kind: str, tags: list[str], stored: StoredContent | None, now: int
) -> Artifact | None:
    """The artifact of content already in the store (None: no content)."""
    if stored is None:
        return None
    return Artifact(
        id=new_id(now),
        task_id=task_id,
        job_id=None,
        type=kind,
        created_at=now,
        finalized=True,
        url=stored.url,
        entity_refs=[],
        tags=tags,
        content=stored.content,
        sha256=stored.sha256,
        size_bytes=stored.size_bytes,
        storage=stored.storage,
    )


def attempt_result(
    task_id: str,
    lease: tuple[str, str],
    artifact: Artifact | None,
    completion: Completion,
    usage: Usage,
    now: int,
    *,
    patch: Artifact | None = None,
) -> Result:
    """The attempt's result; `lease`: its id and its worker; `patch`: a workspace task's patch
    artifact, named in the result's `workspace`."""
    lease_id, worker_id = lease
    workspace = None
    if completion.workspace is not None:
        workspace = completion.workspace | {"patch_artifact_id": patch.id if patch else None}
    return Result(
        id=new_id(now),
        task_id=task_id,
        worker_id=worker_id,
        artifact_id=artifact.id if artifact else None,
        status=completion.status,
        output=completion.output,
        error_message=completion.error_message,
        metrics=completion.metrics,
        completed_at=now,
        lease_id=lease_id,
        error_code=completion.error_code,
        **usage.columns(),
        workspace=workspace,
    )


def end_audit(
    task: tuple[str, TaskStatus, int | None],
    artifact: Artifact | None,
    completion: Completion,
    actor: str,
    now: int,
) -> AuditEntry:
    """One entry for the attempt's end, named for what it made of the task: `task_completed`
    for a success, else `FAILURE_ACTIONS`' (retry scheduled, failed, dead, cancelled). Empty
    parts are left out; a time is ISO 8601 UTC. `task`: its id, status and `not_before`, as the
    end leaves them."""
    task_id, task_status, not_before = task
    duration = completion.metrics.get("duration_ms")
    status = f"Status: {completion.status}"
    parts: list[str | None]
    if task_status == TaskStatus.COMPLETED:
        action = AuditAction.TASK_COMPLETED
        parts = [status, f"artifact: {artifact.id}" if artifact else None]
    else:
        action = FAILURE_ACTIONS[task_status]
        code = completion.error_code or ErrorCode.ERROR
        parts = [
            status + (f" ({code})" if code != completion.status else ""),
            completion.error_message,
        ]
    parts.append(f"duration: {duration}ms" if duration is not None else None)
    if not_before:
        parts.append(f"retry not before {utc_text(not_before)}")
    detail = ", ".join(part for part in parts if part)
    return task_audit(action, task_id, now=now, actor=actor, detail=detail)
