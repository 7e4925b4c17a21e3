"""Task, lease, worker and project states, and which operations each state admits."""

from enum import StrEnum


class TaskStatus(StrEnum):
    BLOCKED = "blocked"
    """Waiting for the tasks it depends on (docs/graphs.md); never claimable."""
    QUEUED = "queued"
    LEASED = "leased"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    """Its run stopped at a tool call a person must decide on; no worker holds it meanwhile."""


class LeaseStatus(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    RELEASED = "released"
    FAILED = "failed"


class WorkerStatus(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"
    SYNCING = "syncing"
    ERROR = "error"
    UNKNOWN = "unknown"


class ResultStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"


class CloneStatus(StrEnum):
    """A managed project's state, and its checkout's on one node (the reference's
    `ProjectCloneStatus`; `propagating` and `synced` are the project's only)."""

    PENDING = "pending"
    CLONING = "cloning"
    CLONED = "cloned"
    FAILED = "failed"
    PROPAGATING = "propagating"
    SYNCED = "synced"


IN_FLIGHT: frozenset[TaskStatus] = frozenset({TaskStatus.LEASED, TaskStatus.RUNNING})
"""A task in one of these states holds exactly one active lease."""

REQUEUEABLE: frozenset[TaskStatus] = frozenset({TaskStatus.FAILED, TaskStatus.DEAD})
"""An operator may put these back in the queue with a fresh attempt budget."""

CANCELLABLE: frozenset[TaskStatus] = frozenset(
    {TaskStatus.BLOCKED, TaskStatus.QUEUED, TaskStatus.AWAITING_APPROVAL, *IN_FLIGHT}
)

WAITING: frozenset[TaskStatus] = frozenset(
    {TaskStatus.BLOCKED, TaskStatus.QUEUED, TaskStatus.AWAITING_APPROVAL}
)
"""No worker holds it: cancelled at once (no attempt to stop)."""

UNSUCCESSFUL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.FAILED, TaskStatus.DEAD, TaskStatus.CANCELLED}
)
"""A dependency that ends in one of these did not give its dependents an answer."""

TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.DEAD, TaskStatus.CANCELLED}
)

CHECKED_OUT: frozenset[CloneStatus] = frozenset({CloneStatus.CLONED, CloneStatus.SYNCED})
"""A node whose checkout is in one of these states is passed over when a project propagates."""
