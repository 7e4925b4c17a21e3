"""Request bodies, with the seed's validation rules (the replies' shapes: `replies.py`).

Scalars are strict about types (a number is not a string, "1" is not a number), as zod was.
Unknown keys are refused (zod dropped them; a typo must not pass for a default), every string
and list is bounded, and no string may hold a NUL character (no database stores one).
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bloom.domain.approvals import MAX_NOTE_CHARS, MAX_REASON_CHARS, Decision, PendingCall
from bloom.domain.branch import PLAIN_BRANCH, is_plain_branch
from bloom.domain.fleet import WORKER_NAME
from bloom.domain.graph import MAX_DEPENDENCIES, MAX_REF_CHARS, OnDependencyFailure
from bloom.domain.models import (
    MAX_CLAIM_WAIT_SEC,
    Completion,
    Task,
)
from bloom.domain.policy import DEFAULT_TIMEOUT_SEC
from bloom.domain.retry import ErrorCode
from bloom.domain.stall import MAX_STALL_SEC, MIN_STALL_SEC, OnStall, stall_sec_problem
from bloom.domain.states import ResultStatus, WorkerStatus
from bloom.domain.tool_calls import MAX_CALLS, MAX_SUMMARY_CHARS, Ruled, ToolCall
from bloom.domain.tool_policy import (
    MAX_APPROVAL_TIMEOUT_SEC,
    MAX_RULE_CHARS,
    MAX_RULES,
    MAX_TURNS,
    Mode,
    ToolPolicy,
    rules_problem,
)
from bloom.domain.usage import MAX_MODEL_CHARS
from bloom.domain.workspace import (
    MAX_BRANCH_CHARS,
    MAX_PATCH_CHARS,
    REPO_NAME,
    WorkspaceProblem,
    WorkspaceResult,
    ref_problem,
)
from bloom.runtime.services.events import (
    MAX_DATA_BYTES,
    MAX_EVENTS,
    MAX_TYPE_CHARS,
    EventDataError,
    serialise_data,
)
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workspaces import WorkspaceRequest
from bloom.web.guards import contains_nul

Cli = Literal["claude", "codex", "gemini"]
"""An agent CLI's name (`bloom.domain.clis.CLIS`)."""

TTL = Annotated[StrictInt, Field(ge=1, le=86_400)]
MAX_ID_CHARS = 200
MAX_PROMPT_CHARS = 200_000
MAX_OUTPUT_CHARS = 4 * 1024 * 1024
MAX_BIGINT = 2**63 - 1
MAX_BATCH_TASKS = 1_000
"""`POST /llm-tasks/batch`: a whole graph of 1,000 tasks in one all-or-nothing call (each item
then has about 5 KiB of the 5 MiB body limit, `BLOOM_MAX_BODY_BYTES`: docs/graphs.md)."""
MAX_BATCH_ENDS = 100
"""`POST /workers/{id}/complete`: attempts ended in one call."""
MAX_CLAIM_TASKS = 32
"""A worker has at most 32 slots (`max_concurrency`)."""
Id = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)]
Label = Annotated[StrictStr, Field(max_length=128)]
Count = Annotated[StrictInt, Field(ge=0, le=MAX_BIGINT)]
Amount = Annotated[StrictFloat, Field(ge=0, le=1e12, allow_inf_nan=False)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if contains_nul(value):
            raise PydanticCustomError("nul_character", "Must not contain NUL characters")
        return value


Rule = Annotated[StrictStr, Field(max_length=MAX_RULE_CHARS)]
Rules = Annotated[list[Rule], Field(max_length=MAX_RULES)]
Turns = Annotated[StrictInt, Field(ge=1, le=MAX_TURNS)]


class RulesBody(Body):
    """Tool rules in the Claude CLI's permission-rule syntax: `Bash`, `Bash(git push:*)`,
    `WebFetch(domain:example.com)`, `Edit(src/**)`, `mcp__server__tool`."""

    allow: Rules = Field(default_factory=list, description="Run without asking.")
    deny: Rules = Field(
        default_factory=list, description="Refused by the CLI; a project's deny always wins."
    )
    ask: Rules = Field(
        default_factory=list,
        description="A call these cover waits for a person's decision (docs/approvals.md).",
    )
    mode: Mode | None = Field(
        None,
        description="The CLI's permission mode (bypassPermissions only where the project's "
        "admin allowed it).",
    )
    max_turns: Turns | None = Field(None, description="The CLI's turn limit.")

    @field_validator("allow", "deny", "ask")
    @classmethod
    def _rules(cls, value: list[str]) -> list[str]:
        problem = rules_problem(value)
        if problem:
            raise PydanticCustomError("rule", problem)
        return value


class ToolsBody(RulesBody):
    approval_timeout_sec: Annotated[StrictInt, Field(ge=1, le=MAX_APPROVAL_TIMEOUT_SEC)] | None = (
        Field(None, description="How long a call in `ask` waits for a decision (default a day).")
    )
    on_timeout: Literal["deny", "fail"] | None = Field(
        None, description="No decision in time: deny the call (default), or fail the task."
    )

    def policy(self) -> ToolPolicy:
        return ToolPolicy(
            allow=tuple(self.allow),
            deny=tuple(self.deny),
            ask=tuple(self.ask),
            mode=self.mode,
            max_turns=self.max_turns,
            approval_timeout_sec=self.approval_timeout_sec,
            on_timeout=self.on_timeout,
        )


class ToolPolicyBody(RulesBody):
    """A project's default tool policy (`PUT /tool-policies/{project}`)."""

    allow_bypass: StrictBool = Field(
        False, description="Whether the project's tasks may run in bypassPermissions mode."
    )


class PolicyBody(Body):
    timeout_sec: StrictInt = Field(DEFAULT_TIMEOUT_SEC, ge=1, le=3600)
    budget: Amount = Field(0, description="USD; 0 means no budget.")
    stall_sec: Annotated[StrictInt, Field(ge=0, le=MAX_STALL_SEC)] | None = Field(
        None,
        description=f"A run printing nothing for longer is stalled: 0 (never) or "
        f"{MIN_STALL_SEC}..{MAX_STALL_SEC}. Absent: the runtime's BLOOM_STALL_SEC.",
    )
    on_stall: OnStall | None = Field(
        None, description="flag (absent: only noticed) or retry (stopped, and the task retried)."
    )
    tools: ToolsBody | None = Field(
        None,
        description="What the agent may do, merged with its project's defaults at create: "
        "docs/approvals.md.",
    )

    @field_validator("stall_sec")
    @classmethod
    def _stall_sec(cls, value: int | None) -> int | None:
        problem = None if value is None else stall_sec_problem(value)
        if problem:
            raise PydanticCustomError("stall_sec", problem)
        return value

    def stored(self) -> dict[str, Any]:
        """The policy as the task keeps it: what was not given about stalls left out (the
        runtime's default then applies when the run is watched)."""
        return self.model_dump(mode="json", exclude_none=True)


class WorkspaceBody(Body):
    repo: StrictStr = Field(
        pattern=f"^{REPO_NAME.pattern}$", description="A managed project's name (`/projects`)."
    )
    ref: StrictStr | None = Field(
        None,
        max_length=255,
        description="The branch, tag or commit to start from (default: the repository's "
        "default branch; the branch itself when it exists on the remote already).",
    )
    branch: StrictStr | None = Field(
        None,
        max_length=MAX_BRANCH_CHARS,
        description="The branch written (default bloom/<context_id>).",
    )
    push: StrictBool | None = Field(
        None, description="Push the branch after each run (default true)."
    )

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        problem = ref_problem(value) if value is not None else None
        if problem:
            raise PydanticCustomError("ref", problem)
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not is_plain_branch(value):
            raise PydanticCustomError("branch", f"Must be {PLAIN_BRANCH}")
        return value

    def request(self) -> WorkspaceRequest:
        return WorkspaceRequest(self.repo, self.ref, self.branch, self.push)


class CreateTaskBody(Body):
    context_id: Id
    agent_slug: Id
    prompt: StrictStr = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    context_hints: list[Annotated[StrictStr, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=100
    )
    policy: PolicyBody = Field(default_factory=PolicyBody)
    desired_format: Literal["json", "text"] = "text"
    max_attempts: StrictInt = Field(3, ge=1, le=10)
    priority: StrictInt = Field(0, ge=-1000, le=1000, description="Higher runs first.")
    idempotency_key: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Same key, same request: the task created the first time (200, not 201).",
    )
    workspace: WorkspaceBody | None = Field(
        None, description="A repository branch the task changes: docs/workspaces.md."
    )
    depends_on: list[Id] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="Tasks to wait for: ids of existing tasks or, in a batch, refs of its tasks "
        f"(at most {MAX_DEPENDENCIES}); the task is `blocked` until they complete "
        "(docs/graphs.md).",
    )
    dependency_artifacts: list[Id] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="Of `depends_on`, the tasks whose artifacts (their output's and, for a "
        "workspace task, its patch) are passed on with their answers, bounded as the answers "
        "(docs/graphs.md).",
    )
    ref: Annotated[StrictStr, Field(min_length=1, max_length=MAX_REF_CHARS)] | None = Field(
        None, description="Its name in a batch, for later tasks of the batch to depend on."
    )
    on_dependency_failure: Literal["cancel", "run"] = Field(
        "cancel",
        description="A dependency that ends failed, dead or cancelled: cancel this task "
        "(default), or run it anyway, told which dependency failed.",
    )
    cli: Cli = Field(
        "claude",
        description="The agent CLI that runs the task (docs/agents.md); it goes only to a "
        "worker that has it.",
    )

    def new_task(self, idempotency_key: str | None = None) -> NewTask:
        """The validated request, for the task service (the key: this body's, else the one
        given, such as the Idempotency-Key header's)."""
        return NewTask(
            context_id=self.context_id,
            agent_slug=self.agent_slug,
            prompt=self.prompt,
            context_hints=self.context_hints,
            policy=self.policy.stored(),
            desired_format=self.desired_format,
            max_attempts=self.max_attempts,
            priority=self.priority,
            idempotency_key=self.idempotency_key or idempotency_key,
            workspace=self.workspace.request() if self.workspace else None,
            depends_on=list(self.depends_on),
            dependency_artifacts=list(self.dependency_artifacts),
            ref=self.ref,
            on_dependency_failure=OnDependencyFailure(self.on_dependency_failure),
            cli=self.cli,
        )


class CreateTasksBody(Body):
    tasks: list[CreateTaskBody] = Field(min_length=1, max_length=MAX_BATCH_TASKS)


@dataclass
class TasksCreated:
    tasks: list[Task]
    created: int
    """How many are new; the others answered to a known idempotency key."""


class LeaseBody(Body):
    worker_id: Id | None = None
    ttl_seconds: TTL | None = None


class ClaimBody(Body):
    wait_seconds: StrictFloat | None = Field(
        None,
        ge=0,
        le=MAX_CLAIM_WAIT_SEC,
        allow_inf_nan=False,
        description="Long-poll up to this long for work (default 25).",
    )
    ttl_seconds: TTL | None = None


class HeartbeatBody(Body):
    lease_id: Id | None = Field(None, description="Fencing: the lease you hold.")
    worker_id: Id | None = None


class MetricsBody(Body):
    duration_ms: Count
    tokens_used: Count | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cost_usd: Amount | None = None
    num_turns: Count | None = None
    model: StrictStr | None = Field(
        None, min_length=1, max_length=MAX_MODEL_CHARS, description="The model that answered."
    )


class PendingCallBody(Body):
    """The tool call a run stopped at, waiting for a person's decision (docs/approvals.md)."""

    tool_use_id: StrictStr = Field(min_length=1, max_length=MAX_ID_CHARS)
    tool_name: StrictStr = Field(min_length=1, max_length=200)
    tool_input: dict[str, Any] = Field(default_factory=dict)
    session_id: Id | None = None
    reason: StrictStr | None = Field(None, max_length=MAX_REASON_CHARS)

    def call(self) -> PendingCall:
        return PendingCall(
            self.tool_use_id, self.tool_name, self.tool_input, self.session_id, self.reason
        )


class DecisionBody(Body):
    decision: Decision
    note: str | None = Field(
        None,
        max_length=MAX_NOTE_CHARS,
        description="Why; on a denial the agent is told it as the tool's answer.",
    )
    remember: StrictBool = Field(
        False,
        description="Approve this same call (tool and input) in the task's context from now "
        "on, without asking again.",
    )


class ToolCallBody(Body):
    """One tool call of the attempt, and how it was decided (docs/approvals.md)."""

    id: StrictStr = Field(max_length=MAX_ID_CHARS)
    name: StrictStr = Field(min_length=1, max_length=200)
    summary: StrictStr = Field(max_length=MAX_SUMMARY_CHARS)
    ruled: Ruled
    decided_by: StrictStr | None = Field(None, max_length=200)
    failed: StrictBool = False

    def call(self) -> ToolCall:
        return ToolCall(self.id, self.name, self.summary, self.ruled, self.decided_by, self.failed)


class AttemptEndBody(Body):
    """An attempt's end, as a complete reports it."""

    status: ResultStatus
    output: StrictStr | None = Field(None, max_length=MAX_OUTPUT_CHARS, validate_default=True)
    error_message: StrictStr | None = Field(
        None, max_length=MAX_OUTPUT_CHARS, validate_default=True
    )
    metrics: MetricsBody
    artifact_type: StrictStr = Field("LLM_RESULT", min_length=1, max_length=128)
    artifact_tags: list[Label] = Field(default_factory=list, max_length=64)
    lease_id: Id | None = Field(None, description="Fencing: the lease you hold.")
    error_code: ErrorCode | None = Field(
        None, description="Why the attempt failed; decides retry, failure or a free retry later."
    )
    retry_at: StrictInt | None = Field(
        None, ge=0, le=MAX_BIGINT, description="Epoch ms before which not to retry."
    )
    session_id: Id | None = None
    workspace: dict[str, Any] | None = Field(
        None,
        description="What the attempt did to its task's branch: {base, head, branch, pushed, "
        "push_error, files_changed, insertions, deletions} (docs/workspaces.md).",
    )
    patch: StrictStr | None = Field(
        None,
        max_length=MAX_PATCH_CHARS,
        description="The change as `git format-patch` writes it: kept as an artifact of type "
        "`patch`.",
    )
    approval: PendingCallBody | None = Field(
        None,
        description="With error_code `approval_required` (and only then): the tool call the run "
        "stopped at. The task waits in `awaiting_approval` for a person's decision.",
    )

    tool_calls: list[ToolCallBody] = Field(
        default_factory=list,
        max_length=MAX_CALLS,
        description="The attempt's tool calls and how each was decided: each kept as an audit "
        "entry (`tool_call`).",
    )

    @model_validator(mode="after")
    def _approval_with_its_code(self) -> "AttemptEndBody":
        asked = self.error_code == ErrorCode.APPROVAL_REQUIRED
        if asked != (self.approval is not None):
            raise PydanticCustomError(
                "approval",
                "approval and error_code 'approval_required' go together",
            )
        return self

    @field_validator("workspace")
    @classmethod
    def _workspace(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return WorkspaceResult.from_json(value).to_json()
        except WorkspaceProblem as exc:
            raise PydanticCustomError("workspace", str(exc)) from None

    @field_validator("output", "error_message")
    @classmethod
    def _envelope(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A success carries its output (maybe empty), an error its message."""
        needed = {"output": ResultStatus.SUCCESS, "error_message": ResultStatus.ERROR}
        status = info.data.get("status")
        if value is None and status == needed[str(info.field_name)]:
            raise PydanticCustomError(
                "required", "Required when status is '{status}'", {"status": status}
            )
        return value

    def completion(self) -> Completion:
        return Completion(
            status=self.status,
            output=self.output,
            error_message=self.error_message,
            metrics=self.metrics.model_dump(exclude_none=True)
            | {"tokens_used": self.metrics.tokens_used},
            artifact_type=self.artifact_type,
            artifact_tags=self.artifact_tags,
            error_code=self.error_code,
            retry_at=self.retry_at,
            session_id=self.session_id,
            workspace=self.workspace,
            patch=self.patch or None,
            approval=self.approval.call() if self.approval else None,
            tool_calls=tuple(call.call() for call in self.tool_calls),
        )


class EventBody(Body):
    type: StrictStr = Field(
        min_length=1,
        max_length=MAX_TYPE_CHARS,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="The event's kind (no control characters: it becomes the SSE event name).",
    )
    data: Any = Field(None, description=f"Any JSON, at most {MAX_DATA_BYTES} bytes serialised.")

    @field_validator("data")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        try:
            serialise_data(value)
        except EventDataError as exc:
            raise PydanticCustomError("event_data", "{problem}", {"problem": exc.message}) from None
        return value


class CompleteBody(AttemptEndBody):
    worker_id: Id | None = None
    claim_next: ClaimBody | None = Field(
        None,
        description="Once recorded, claim the worker's next task as `POST /workers/{id}/claim` "
        "would, and answer it as `next` (null: none came within `wait_seconds`).",
    )
    events: list[EventBody] | None = Field(
        None,
        max_length=MAX_EVENTS,
        description="The attempt's last live output, stored in the complete's transaction after "
        "the task's earlier events, as `POST /llm-tasks/{id}/events` stores them (not again on "
        "a repeat).",
    )


class AttemptEndItem(AttemptEndBody):
    task_id: Id


class ClaimNextBody(ClaimBody):
    max_tasks: StrictInt = Field(
        1, ge=1, le=MAX_CLAIM_TASKS, description="Grant up to this many at once (free slots)."
    )


class CompleteManyBody(Body):
    completes: list[AttemptEndItem] = Field(min_length=1, max_length=MAX_BATCH_ENDS)
    claim_next: ClaimNextBody | None = Field(
        None,
        description="Once recorded, claim up to `max_tasks` of the worker's next tasks, "
        "answered as `next` (a long poll, when the first look finds none, waits for one).",
    )


class CapabilitiesBody(Body):
    claude_cli: StrictBool = True
    max_concurrency: StrictInt = Field(1, ge=1, le=MAX_CLAIM_TASKS)
    labels: list[Label] = Field(default_factory=list, max_length=64)
    ready: StrictBool | None = Field(
        None,
        description="Whether the worker can run any of its CLIs now (false: no credentials; "
        "unset: ready, as the seed's workers are).",
    )
    not_ready: StrictStr | None = Field(
        None, max_length=1000, description="Why the worker is not ready, and what to do."
    )
    workspaces: StrictBool | None = Field(
        None,
        description="Whether the worker runs tasks with a workspace (git present, clones "
        "allowed): only such a worker is given them.",
    )
    clis: dict[Cli, Annotated[StrictStr, Field(max_length=64)]] | None = Field(
        None,
        description="The agent CLIs the worker runs now (it has them, and their credentials), "
        'with their versions ({"claude": "2.1.330"}): a task goes only to a worker that has '
        "its `cli`. Unset: Claude only.",
    )


class RegisterWorkerBody(Body):
    name: StrictStr = Field(pattern=WORKER_NAME, description="Becomes the worker's id.")
    url: StrictStr | None = Field(None, max_length=2048)
    status: WorkerStatus = WorkerStatus.ONLINE
    capabilities: CapabilitiesBody | None = None
    ip_addrs: list[Label] | None = Field(None, max_length=64)
    agent_version: StrictStr | None = Field(None, max_length=128)
    os_info: StrictStr | None = Field(None, max_length=512)
    install_method: StrictStr | None = Field(None, max_length=64)


class AppendEventsBody(Body):
    lease_id: Id = Field(description="Fencing: the lease you hold.")
    worker_id: Id | None = None
    events: list[EventBody] = Field(max_length=MAX_EVENTS)


class AgentUpdateBody(Body):
    repo_url: StrictStr | None = Field(
        None,
        max_length=2048,
        description="Where the agent updates from (default: the reference's).",
    )


class ApproveUrlBody(Body):
    url: StrictStr | None = Field(
        None,
        max_length=2048,
        description="The proposed URL being approved, as the admin saw it: refused (409) if the "
        "proposal has changed meanwhile. Unset: whatever is proposed.",
    )


class ConfigBody(Body):
    membridge_server_url: HttpUrl
    admin_key: StrictStr = Field(
        max_length=1024, description="Empty: keep the stored key (only the URL changes)."
    )

    @field_validator("membridge_server_url")
    @classmethod
    def _no_credentials(cls, value: HttpUrl) -> HttpUrl:
        """The URL is shown and audited: a password in it would leak (the key has its field)."""
        if value.username or value.password:
            raise PydanticCustomError("url_credentials", "Must not carry a user or password")
        return value


class BudgetBody(Body):
    daily_usd: Amount | None = Field(None, description="Per UTC day; null: no daily limit.")
    monthly_usd: Amount | None = Field(None, description="Per UTC month; null: no monthly limit.")
