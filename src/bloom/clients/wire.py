"""The runtime's wire contract as the worker and the CLI read it: frozen values parsed from its
replies, and the bodies of the calls that fence an attempt.

Fields the seed's runtime does not send (a task's `priority`, a heartbeat's `cancel_requested`,
…) are optional, with our runtime's defaults; the seed's own fields are required. Values that
`--json` prints keep the reply as it came (`raw`), so users see every field the runtime sent.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from bloom.clients.fields import Fields, WireError
from bloom.domain.approvals import PendingCall
from bloom.domain.policy import DEFAULT_TIMEOUT_SEC
from bloom.domain.retry import ErrorCode
from bloom.domain.states import LeaseStatus, ResultStatus, TaskStatus, WorkerStatus
from bloom.domain.tool_calls import ToolCall
from bloom.domain.tool_policy import ToolPolicy
from bloom.domain.workspace import (
    PATCH_ARTIFACT,
    WorkspaceProblem,
    WorkspaceResult,
    WorkspaceSpec,
)

Raw = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Policy:
    """What one attempt may spend: seconds, and USD (0: no budget); and how long its run may
    print nothing, and what then (None: the runtime's default, `flag`)."""

    timeout_sec: int = DEFAULT_TIMEOUT_SEC
    budget: float = 0.0
    stall_sec: int | None = None
    on_stall: str | None = None
    tools: ToolPolicy | None = None
    """The task's effective tool policy (its project's merged in at create), if any."""

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            timeout_sec=fields.optional_integer("timeout_sec") or DEFAULT_TIMEOUT_SEC,
            budget=fields.number("budget", 0.0),
            stall_sec=fields.optional_integer("stall_sec"),
            on_stall=fields.optional_text("on_stall"),
            tools=fields.optional_nested("tools", _tool_policy),
        )


def _tool_policy(data: Raw, where: str = "") -> ToolPolicy:
    fields = Fields(data, where)
    return ToolPolicy(
        allow=fields.texts("allow"),
        deny=fields.texts("deny"),
        ask=fields.texts("ask"),
        mode=fields.optional_text("mode"),
        max_turns=fields.optional_integer("max_turns"),
        approval_timeout_sec=fields.optional_integer("approval_timeout_sec"),
        on_timeout=fields.optional_text("on_timeout"),
    )


@dataclass(frozen=True, slots=True)
class StallInfo:
    """A running task's attempt found stalled: its lease and worker, when it was found so, and
    since when it has printed nothing (epoch ms)."""

    lease_id: str
    worker_id: str
    stalled_at: int
    silent_since: int

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            lease_id=fields.text("lease_id"),
            worker_id=fields.text("worker_id"),
            stalled_at=fields.integer("stalled_at"),
            silent_since=fields.integer("silent_since"),
        )


@dataclass(frozen=True, slots=True)
class HoldInfo:
    """Why a queued task waits: its project's budget is spent until `until` (epoch ms)."""

    project: str
    until: int
    reason: str

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(fields.text("project"), fields.integer("until"), fields.text("reason"))


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A task as the runtime shows it."""

    id: str
    context_id: str
    agent_slug: str
    prompt: str
    context_hints: tuple[str, ...]
    policy: Policy
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
    not_before: int | None = None
    cancel_requested: bool = False
    last_error: str | None = None
    session_id: str | None = None
    hold: HoldInfo | None = None
    stall: StallInfo | None = None
    workspace: WorkspaceSpec | None = None
    cli: str = "claude"
    """The agent CLI that runs it; an older runtime, which sends none, runs Claude only."""
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            id=fields.text("id"),
            context_id=fields.text("context_id"),
            agent_slug=fields.text("agent_slug"),
            prompt=fields.text("prompt"),
            context_hints=fields.texts("context_hints"),
            policy=fields.nested("policy", Policy.from_json),
            desired_format=fields.text("desired_format"),
            status=fields.state("status", TaskStatus),
            created_at=fields.integer("created_at"),
            updated_at=fields.integer("updated_at"),
            lease_id=fields.optional_text("lease_id"),
            worker_id=fields.optional_text("worker_id"),
            attempts=fields.integer("attempts"),
            max_attempts=fields.integer("max_attempts"),
            priority=fields.optional_integer("priority") or 0,
            idempotency_key=fields.optional_text("idempotency_key"),
            not_before=fields.optional_integer("not_before"),
            cancel_requested=fields.flag("cancel_requested", False),
            last_error=fields.optional_text("last_error"),
            session_id=fields.optional_text("session_id"),
            hold=fields.optional_nested("hold", HoldInfo.from_json),
            stall=fields.optional_nested("stall", StallInfo.from_json),
            workspace=fields.optional_nested("workspace", _workspace),
            cli=fields.optional_text("cli") or "claude",
            raw=fields.data,
        )


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """One attempt's lease."""

    id: str
    task_id: str
    worker_id: str
    status: LeaseStatus
    started_at: int
    expires_at: int
    ttl_seconds: int
    last_heartbeat: int
    context_id: str | None
    stalled_at: int | None = None

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            id=fields.text("id"),
            task_id=fields.text("task_id"),
            worker_id=fields.text("worker_id"),
            status=fields.state("status", LeaseStatus),
            started_at=fields.integer("started_at"),
            expires_at=fields.integer("expires_at"),
            ttl_seconds=fields.integer("ttl_seconds"),
            last_heartbeat=fields.integer("last_heartbeat"),
            context_id=fields.optional_text("context_id"),
            stalled_at=fields.optional_integer("stalled_at"),
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """A claim's answer: the lease this worker now holds, and its task."""

    lease: LeaseInfo
    task: TaskInfo

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            lease=fields.nested("lease", LeaseInfo.from_json),
            task=fields.nested("task", TaskInfo.from_json),
        )


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A heartbeat's body: the lease it renews (fencing), and the worker holding it."""

    lease_id: str
    worker_id: str

    def to_json(self) -> dict[str, Any]:
        return {"lease_id": self.lease_id, "worker_id": self.worker_id}


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """The renewed lease, and whether someone asked for the task to stop."""

    lease: LeaseInfo
    expires_at: int
    cancel_requested: bool = False
    task_status: TaskStatus | None = None

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            lease=fields.nested("lease", LeaseInfo.from_json),
            expires_at=fields.integer("expires_at"),
            cancel_requested=fields.flag("cancel_requested", False),
            task_status=fields.optional_state("task_status", TaskStatus),
        )


@dataclass(frozen=True, slots=True)
class ClaimNext:
    """A complete's `claim_next`: how long to wait for the next task, the lease to ask for."""

    wait_sec: float = 0.0
    ttl_sec: int | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"wait_seconds": float(self.wait_sec)}
        return body | ({"ttl_seconds": self.ttl_sec} if self.ttl_sec is not None else {})


@dataclass(frozen=True, slots=True)
class CompleteRequest:
    """A complete's body: the attempt's result envelope, fenced by its lease."""

    lease_id: str
    worker_id: str
    status: ResultStatus
    metrics: Mapping[str, Any]
    output: str | None = None
    error_message: str | None = None
    error_code: ErrorCode | None = None
    retry_at: int | None = None
    session_id: str | None = None
    workspace: WorkspaceResult | None = None
    patch: str | None = None
    approval: PendingCall | None = None
    """With error code `approval_required`: the tool call the run stopped at."""
    tool_calls: Sequence[ToolCall] = ()
    """The attempt's tool calls, and how each was decided."""
    events: Sequence[Mapping[str, Any]] = ()
    """The attempt's last live output (`{type, data}`), stored with the complete."""
    claim_next: ClaimNext | None = None
    """Once the complete is recorded, claim this worker's next task in the same call."""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": str(self.status),
            "output": self.output,
            "error_message": self.error_message,
            "metrics": dict(self.metrics),
        }
        if self.error_code is not None:
            body["error_code"] = str(self.error_code)
        if self.retry_at is not None:
            body["retry_at"] = self.retry_at
        if self.session_id:
            body["session_id"] = self.session_id
        if self.workspace is not None:
            body["workspace"] = self.workspace.to_json()
        if self.patch:
            body["patch"] = self.patch
        if self.approval is not None:
            body["approval"] = self.approval.to_json()
        if self.tool_calls:
            body["tool_calls"] = [call.to_json() for call in self.tool_calls]
        if self.events:
            body["events"] = list(self.events)
        if self.claim_next is not None:
            body["claim_next"] = self.claim_next.to_json()
        return body | {"lease_id": self.lease_id, "worker_id": self.worker_id}


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """A stored output; its content is fetched apart."""

    id: str
    task_id: str
    type: str
    created_at: int
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            id=fields.text("id"),
            task_id=fields.text("task_id"),
            type=fields.text("type"),
            created_at=fields.integer("created_at"),
            raw=fields.data,
        )


def answers(artifacts: list[ArtifactInfo]) -> list[ArtifactInfo]:
    """A task's answers among its artifacts (the patches of its changes left out), in order."""
    return [artifact for artifact in artifacts if artifact.type != PATCH_ARTIFACT]


@dataclass(frozen=True, slots=True)
class ResultInfo:
    """An attempt's recorded result."""

    id: str
    task_id: str
    status: ResultStatus
    artifact_id: str | None
    error_code: str | None = None

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            id=fields.text("id"),
            task_id=fields.text("task_id"),
            status=fields.state("status", ResultStatus),
            artifact_id=fields.optional_text("artifact_id"),
            error_code=fields.optional_text("error_code"),
        )


@dataclass(frozen=True, slots=True)
class CompleteReply:
    """The task as the complete left it, with its result (and artifact, if any)."""

    task: TaskInfo
    result: ResultInfo
    artifact: ArtifactInfo | None
    next: Grant | None = None
    """The worker's next task, when the complete asked for `claim_next` and one was granted."""
    next_error: str | None = None
    """Why that claim was refused (the complete stands)."""

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            task=fields.nested("task", TaskInfo.from_json),
            result=fields.nested("result", ResultInfo.from_json),
            artifact=fields.optional_nested("artifact", ArtifactInfo.from_json),
            next=fields.optional_nested("next", Grant.from_json),
            next_error=fields.optional_text("next_error"),
        )


@dataclass(frozen=True, slots=True)
class EventsAccepted:
    """How much of a batch of events the runtime took, and the task's last sequence number."""

    task_id: str
    last_seq: int
    accepted: int

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            task_id=fields.text("task_id"),
            last_seq=fields.integer("last_seq"),
            accepted=fields.integer("accepted"),
        )


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker as the runtime lists it; `labels` and `paused_until` also where the seed's
    workers keep them (capabilities, top level)."""

    id: str
    status: WorkerStatus
    capabilities: Mapping[str, Any]
    last_heartbeat: int | None
    active_leases: int = 0
    labels: tuple[str, ...] = ()
    paused_until: int | None = None
    url: str = ""
    pending_url: str | None = None
    """An agent URL awaiting an admin's approval (`bloom worker approve`)."""
    not_ready: str | None = None
    """Why the worker cannot run Claude now (capabilities `ready: false`); None when ready."""
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        capabilities = fields.mapping("capabilities")
        inner = Fields(capabilities, fields.path("capabilities"))
        paused = fields.number("paused_until", 0) or inner.number("paused_until", 0)
        return cls(
            id=fields.text("id"),
            status=fields.state("status", WorkerStatus),
            capabilities=capabilities,
            last_heartbeat=fields.optional_integer("last_heartbeat"),
            active_leases=fields.optional_integer("active_leases") or 0,
            labels=fields.texts("labels") or inner.texts("labels"),
            paused_until=int(paused) or None,
            url=fields.optional_text("url") or "",
            pending_url=fields.optional_text("pending_url"),
            not_ready=None
            if inner.flag("ready", True)
            else inner.optional_text("not_ready") or "not ready",
            raw=fields.data,
        )


@dataclass(frozen=True, slots=True)
class CallerInfo:
    """Who the runtime takes the caller for (`GET /session`): its role, None when anonymous
    with keys required."""

    authenticated: bool
    kind: str
    role: str | None

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            authenticated=fields.flag("authenticated", False),
            kind=fields.text("kind"),
            role=fields.optional_text("role"),
        )


@dataclass(frozen=True, slots=True)
class Health:
    """The runtime's health: `ok`, which service, which version."""

    status: str
    service: str
    version: str

    @classmethod
    def from_json(cls, data: Raw, where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(
            status=fields.text("status"),
            service=fields.text("service"),
            version=fields.text("version"),
        )


def _workspace(data: Raw, where: str) -> WorkspaceSpec:
    try:
        return WorkspaceSpec.from_json(data)
    except WorkspaceProblem as exc:
        raise WireError(f"{where}: {exc}") from None
