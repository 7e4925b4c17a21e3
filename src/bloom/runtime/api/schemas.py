"""Request bodies, with the seed's validation rules, and response shapes for the OpenAPI page.

Scalars are strict about types (a number is not a string, "1" is not a number), as zod was, and
unknown keys are dropped, as zod did.
"""

from dataclasses import dataclass, field
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
)
from pydantic_core import PydanticCustomError

from bloom.domain.fleet import WORKER_NAME
from bloom.domain.models import Artifact, Lease, Result, Task, Worker
from bloom.domain.retry import ErrorCode
from bloom.domain.states import ResultStatus, WorkerStatus
from bloom.services.events import (
    MAX_DATA_BYTES,
    MAX_EVENTS,
    MAX_TYPE_CHARS,
    EventDataError,
    serialise_data,
)

TTL = Annotated[StrictInt, Field(ge=1, le=86_400)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PolicyBody(Body):
    timeout_sec: StrictInt = Field(120, ge=1, le=3600)
    budget: StrictFloat = Field(0, ge=0)


class CreateTaskBody(Body):
    context_id: StrictStr = Field(min_length=1)
    agent_slug: StrictStr = Field(min_length=1)
    prompt: StrictStr = Field(min_length=1)
    context_hints: list[StrictStr] = Field(default_factory=list)
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


class LeaseBody(Body):
    worker_id: StrictStr | None = Field(None, min_length=1)
    ttl_seconds: TTL | None = None


class ClaimBody(Body):
    wait_seconds: StrictFloat | None = Field(
        None, ge=0, le=120, description="Long-poll up to this long for work (default 25)."
    )
    ttl_seconds: TTL | None = None


class HeartbeatBody(Body):
    lease_id: StrictStr | None = Field(
        None, min_length=1, description="Fencing: the lease you hold."
    )
    worker_id: StrictStr | None = Field(None, min_length=1)


class MetricsBody(Body):
    duration_ms: StrictInt = Field(ge=0)
    tokens_used: StrictInt | None = Field(None, ge=0)
    input_tokens: StrictInt | None = Field(None, ge=0)
    output_tokens: StrictInt | None = Field(None, ge=0)
    cost_usd: StrictFloat | None = Field(None, ge=0)
    num_turns: StrictInt | None = Field(None, ge=0)


class CompleteBody(Body):
    status: ResultStatus
    output: StrictStr | None = Field(None, validate_default=True)
    error_message: StrictStr | None = Field(None, validate_default=True)
    metrics: MetricsBody
    artifact_type: StrictStr = Field("LLM_RESULT", min_length=1)
    artifact_tags: list[StrictStr] = Field(default_factory=list)
    lease_id: StrictStr | None = Field(
        None, min_length=1, description="Fencing: the lease you hold."
    )
    worker_id: StrictStr | None = Field(None, min_length=1)
    error_code: ErrorCode | None = Field(
        None, description="Why the attempt failed; decides retry, failure or a free retry later."
    )
    retry_at: StrictInt | None = Field(
        None, ge=0, description="Epoch ms before which not to retry."
    )
    session_id: StrictStr | None = Field(None, min_length=1)

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

    def metrics_dict(self) -> dict[str, Any]:
        return self.metrics.model_dump(exclude_none=True) | {
            "tokens_used": self.metrics.tokens_used
        }


class CapabilitiesBody(Body):
    claude_cli: StrictBool = True
    max_concurrency: StrictInt = Field(1, ge=1, le=32)
    labels: list[StrictStr] = Field(default_factory=list)


class RegisterWorkerBody(Body):
    name: StrictStr = Field(pattern=WORKER_NAME, description="Becomes the worker's id.")
    url: StrictStr | None = Field(None, max_length=2048)
    status: WorkerStatus = WorkerStatus.ONLINE
    capabilities: CapabilitiesBody | None = None
    ip_addrs: list[StrictStr] | None = None
    agent_version: StrictStr | None = Field(None, max_length=128)
    os_info: StrictStr | None = Field(None, max_length=512)
    install_method: StrictStr | None = Field(None, max_length=64)


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


class AppendEventsBody(Body):
    lease_id: StrictStr = Field(min_length=1, description="Fencing: the lease you hold.")
    worker_id: StrictStr | None = Field(None, min_length=1)
    events: list[EventBody] = Field(max_length=MAX_EVENTS)


class ConfigBody(Body):
    membridge_server_url: HttpUrl
    admin_key: StrictStr = Field(min_length=1)


# Response shapes (documentation; routes render the dataclasses directly)


@dataclass
class LeaseGrant:
    lease: Lease
    worker: Worker


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
    membridge: dict[str, Any]
