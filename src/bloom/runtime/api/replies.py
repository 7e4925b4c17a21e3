"""The shapes of the runtime's replies, for its OpenAPI document: routes render the domain's
dataclasses directly (`runtime/http.py`), and name these as what they answer."""

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from bloom.domain.models import Artifact, Lease, Result, Task, Worker
from bloom.domain.usage import UsageGroup, UsageRow, UsageSums


@dataclass
class LeaseGrant:
    lease: Lease
    worker: Worker


@dataclass
class DispatchReply:
    dispatched: bool
    task_id: str
    worker_id: str
    lease_id: str
    execution: Any = field(
        metadata={"description": "The agent's answer; null while it is still working."}
    )


@dataclass
class ClaimReply:
    lease: Lease
    task: Task


@dataclass
class HeartbeatReply:
    lease: Lease
    expires_at: int
    cancel_requested: bool
    task_status: str


@dataclass
class CompleteReply:
    task: Task
    artifact: Artifact | None
    result: Result


@dataclass
class CompleteClaimReply(CompleteReply):
    """A complete that asked for `claim_next`: the worker's next grant too, or why it could
    not claim (the complete itself stands either way)."""

    next: ClaimReply | None
    next_error: str | None


@dataclass
class AttemptEnded:
    """One end of a batch: what became of its task, or why it was refused (`error`, with the
    HTTP status a single complete would have answered)."""

    task_id: str
    task_status: str | None = None
    result_id: str | None = None
    artifact_id: str | None = None
    replayed: bool = False
    error: str | None = None
    status_code: int | None = None


@dataclass
class CompleteManyReply:
    completed: list[AttemptEnded]
    next: list[ClaimReply]
    next_error: str | None


@dataclass(frozen=True)
class WorkerDetail(Worker):
    leases: list[Lease] = field(default_factory=list)


@dataclass
class EventsAccepted:
    task_id: str
    last_seq: int
    accepted: int


@dataclass
class Removed:
    removed: bool
    id: str


@dataclass
class Health:
    status: str
    service: str
    version: str
    uptime: float
    storage: str
    database: str  # "ok", or "unreachable" (with status "unavailable" and 503)
    membridge: dict[str, Any]
    insecure: bool | None = None  # true, with `warning`, when serving open (--insecure)
    warning: str | None = None


class UsageAnswer(BaseModel):
    """`GET /usage`: sums per group over [from, to), and over the whole window."""

    group_by: UsageGroup
    from_: int = Field(alias="from", description="The window's start, epoch ms (inclusive).")
    to: int = Field(description="The window's end, epoch ms (exclusive).")
    groups: list[UsageRow] = Field(
        description="The costliest groups first (time groups in order), each with its key."
    )
    total: UsageSums
    truncated: bool = Field(description="More groups than listed; the total counts them all.")
