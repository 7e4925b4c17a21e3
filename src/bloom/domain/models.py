"""The runtime's entities, with the seed's field names (they are the HTTP contract's names too).

Timestamps are Unix epoch milliseconds; states are the enums of `states.py` (stored and sent as
their text). These are plain values: storage builds them from rows, services pass them around,
the API serialises them as they are.
"""

from dataclasses import dataclass, field
from typing import Any

from bloom.domain.approvals import PendingCall
from bloom.domain.states import (
    CloneStatus,
    LeaseStatus,
    ResultStatus,
    TaskStatus,
    WorkerStatus,
)
from bloom.domain.tool_calls import ToolCall

DEFAULT_CAPABILITIES: dict[str, Any] = {"claude_cli": True, "max_concurrency": 1, "labels": []}
MAX_CLAIM_WAIT_SEC = 120
"""The longest a claim may long-poll for work (a request's `wait_seconds`, the runtime's and the
worker's defaults); a reverse proxy's read timeout must be longer."""


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    context_id: str
    agent_slug: str
    prompt: str
    context_hints: list[str]
    policy: dict[str, Any]
    desired_format: str
    status: TaskStatus
    created_at: int
    updated_at: int
    lease_id: str | None
    worker_id: str | None
    attempts: int
    max_attempts: int
    priority: int = 0
    idempotency_key: str | None = None
    queued_at: int | None = None
    not_before: int | None = None
    cancel_requested: bool = False
    last_error: str | None = None
    session_id: str | None = None
    workspace: dict[str, Any] | None = None
    """The repository and branch the task changes (`domain.workspace.WorkspaceSpec`)."""
    dependencies: int = 0
    """How many tasks it depends on (docs/graphs.md); 0 for a task that stands alone."""
    waiting_on: int = 0
    """Of those, how many have not ended as it needs (it is `blocked` while above 0)."""
    has_dependents: bool = False
    """Whether any task depends on it (its end then releases or cancels them)."""
    on_dependency_failure: str | None = None
    """`cancel` or `run` (for a task with dependencies): what a dependency's failure does."""
    cancelled_for: str | None = None
    """The failed dependency it was cancelled for (a requeue of that one puts it back)."""
    cli: str = "claude"
    """The agent CLI that runs it (`domain.clis.CLIS`)."""


@dataclass(frozen=True, slots=True)
class Lease:
    id: str
    task_id: str
    worker_id: str
    started_at: int
    expires_at: int
    ttl_seconds: int
    status: LeaseStatus
    last_heartbeat: int
    context_id: str | None
    claimed_at: int | None = None
    ended_at: int | None = None
    stalled_at: int | None = None
    """When its run was found silent past its `stall_sec` (`stall.py`); cleared by new output."""


@dataclass(frozen=True, slots=True)
class Worker:
    id: str
    node_id: str
    url: str
    status: WorkerStatus
    capabilities: dict[str, Any]
    last_heartbeat: int | None
    ip_addrs: list[str]
    obs_count: int
    db_sha: str
    registered_at: int
    active_leases: int
    agent_version: str
    os_info: str
    install_method: str
    source: str = "api"
    membridge_seen_at: int | None = None
    paused_until: int | None = None
    """Epoch ms before which the worker takes no work (a usage limit's reset); it lapses."""
    pending_url: str | None = None
    """An agent URL proposed by the worker itself or by Membridge, awaiting an admin's approval
    (the runtime calls only `url`, which only an admin sets)."""

    @property
    def max_concurrency(self) -> int:
        return int(self.capabilities.get("max_concurrency", 1))

    @property
    def claude_cli(self) -> bool:
        return bool(self.capabilities.get("claude_cli", True))

    @property
    def ready(self) -> bool:
        """Whether the worker says it can run Claude now (false: no credentials)."""
        return self.capabilities.get("ready") is not False


@dataclass(frozen=True, slots=True)
class Artifact:
    id: str
    task_id: str
    job_id: str | None
    type: str
    created_at: int
    finalized: bool
    url: str | None
    entity_refs: list[str]
    tags: list[str]
    content: str | None
    sha256: str | None = None
    size_bytes: int | None = None
    storage: str = "db"


@dataclass(frozen=True, slots=True)
class Result:
    id: str
    task_id: str
    worker_id: str
    artifact_id: str | None
    status: ResultStatus
    output: str | None
    error_message: str | None
    metrics: dict[str, Any]
    completed_at: int
    lease_id: str | None = None
    error_code: str | None = None
    # what the attempt cost (`Usage`, copied from `metrics`), typed so it sums in SQL
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_used: int | None = None
    num_turns: int | None = None
    duration_ms: int | None = None
    model: str | None = None
    workspace: dict[str, Any] | None = None
    """What the attempt did to its branch (`domain.workspace.WorkspaceResult`), and the id of
    its `patch` artifact."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str
    timestamp: int
    action: str
    entity_type: str
    entity_id: str
    actor: str
    detail: str
    task_id: str | None = None


@dataclass(frozen=True, slots=True)
class ManagedProject:
    """A git repository the runtime clones onto nodes through their agents (the reference's
    `managed_projects` row); its name is unique (ours)."""

    id: str
    name: str
    repo_url: str
    canonical_id: str
    target_path: str | None
    clone_status: CloneStatus
    primary_node_id: str | None
    created_at: int
    updated_at: int
    error_message: str | None


@dataclass(frozen=True, slots=True)
class ProjectNode:
    """A managed project's checkout on one node (the reference's `project_node_status` row);
    one per project and node (ours)."""

    id: str
    project_id: str
    node_id: str
    clone_status: CloneStatus
    last_sync_at: int | None
    error_message: str | None
    repo_path: str | None


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One entry of a task's live output: `seq` counts 1, 2, 3… per task, without gaps."""

    task_id: str
    seq: int
    lease_id: str | None
    worker_id: str | None
    type: str
    data: Any
    created_at: int


@dataclass(frozen=True, slots=True)
class Completion:
    """What a worker reports when an attempt ends (the seed's result envelope, plus error codes)."""

    status: ResultStatus
    output: str | None
    error_message: str | None
    metrics: dict[str, Any]
    artifact_type: str = "LLM_RESULT"
    artifact_tags: list[str] = field(default_factory=list)
    error_code: str | None = None
    retry_at: int | None = None
    session_id: str | None = None
    workspace: dict[str, Any] | None = None
    """The attempt's `WorkspaceResult` (JSON), for a task with a workspace."""
    patch: str | None = None
    """The change as `git format-patch` wrote it, kept as an artifact of type `patch`."""
    approval: PendingCall | None = None
    """The tool call the run stopped at, with error code `approval_required`."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The attempt's tool calls and how each was decided (each an audit entry)."""
