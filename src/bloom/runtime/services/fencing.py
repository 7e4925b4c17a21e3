"""Fencing: a write on behalf of an attempt names its lease, and only the live lease of the task,
held by the caller, may write. A lease that expired, was released or was replaced is refused with
a conflict (409) for good; a lease of another worker with 403; an unknown one with 404."""

from bloom.domain.errors import Conflict, Forbidden, NotFound
from bloom.domain.models import Lease, Task
from bloom.domain.states import IN_FLIGHT, LeaseStatus
from bloom.runtime.storage.repositories import Repositories

TASK_OR_LEASE_NOT_FOUND = "Task or lease not found"


def lapsed(lease: Lease, task: Task, now: int) -> Conflict:
    """Why `lease` cannot be used any more."""
    if task.lease_id != lease.id:
        reason = f"superseded by lease {task.lease_id}" if task.lease_id else "task was requeued"
    elif lease.status != LeaseStatus.ACTIVE:
        reason = lease.status
    elif lease.expires_at < now:
        reason = "expired"
    else:
        reason = f"task is {task.status}"
    return Conflict(f"Lease {lease.id} is no longer active ({reason})")


async def fenced(
    tx: Repositories,
    task_id: str,
    lease_id: str | None,
    worker_id: str | None,
    *,
    completing: bool,
) -> tuple[Task, Lease]:
    """The task and the lease the caller names (default: the task's current one), checked to
    belong together and to the caller."""
    found = await tx.leases.task_with_lease(task_id, lease_id)
    return checked(found, task_id, lease_id, worker_id, completing=completing)


def checked(
    found: tuple[Task, Lease | None] | None,
    task_id: str,
    lease_id: str | None,
    worker_id: str | None,
    *,
    completing: bool,
) -> tuple[Task, Lease]:
    """`fenced`'s checks of what was read for the task and the lease named."""
    if found is None:
        raise NotFound("Task not found" if completing else TASK_OR_LEASE_NOT_FOUND)
    task, lease = found
    if lease is None and lease_id is None and completing:
        raise Conflict(f"Task status is '{task.status}', expected 'leased' or 'running'")
    if lease is None or lease.task_id != task_id:
        raise NotFound(TASK_OR_LEASE_NOT_FOUND)
    if worker_id is not None and lease.worker_id != worker_id:
        raise Forbidden(
            f"Lease {lease.id} is held by worker '{lease.worker_id}', not '{worker_id}'"
        )
    return task, lease


async def live_lease(
    tx: Repositories, task_id: str, lease_id: str, worker_id: str | None, now: int
) -> tuple[Task, Lease]:
    """For writes on behalf of a running attempt (its events): the task and the lease named,
    which must be the task's current lease, active and unexpired, and held by `worker_id` when
    given; otherwise the same refusals heartbeat and complete give (404, 409)."""
    task, lease = await fenced(tx, task_id, lease_id, worker_id, completing=True)
    if (
        task.lease_id != lease.id
        or task.status not in IN_FLIGHT
        or lease.status != LeaseStatus.ACTIVE
        or lease.expires_at < now
    ):
        raise lapsed(lease, task, now)
    return task, lease
