"""Request bodies and response shapes of the control plane's HTTP API.

Bodies validate as the reference's pydantic models did (FastAPI's 422 on failure), with bounds
the reference lacked: unknown keys are refused, every string and list is bounded, and no string
may hold a NUL character. Responses show timestamps as float seconds, the reference's convention.
"""

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from bloom.domain.fleet import WORKER_NAME
from bloom.membridge.models import Agent, Job, Leadership, Node
from bloom.membridge.rules import ProjectEntry, Role
from bloom.web.guards import contains_nul

AgentStatus = Literal["online", "offline", "syncing", "error", "unknown"]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^/\x00-\x1f\x7f]+$")]
AgentName = Annotated[
    str, Field(pattern=WORKER_NAME, description="Becomes the runtime's worker id.")
]
Text128 = Annotated[str, Field(max_length=128)]
MAX_BIGINT = 2**63 - 1


def seconds(ms: int | None) -> float | None:
    return ms / 1000 if ms is not None else None


def _agent_url(value: str) -> str:
    """Empty, or an http(s) URL with a host; stored without trailing slashes."""
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
        raise ValueError("must be an http:// or https:// URL, or empty")
    return value.rstrip("/")


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if contains_nul(value):
            raise PydanticCustomError("nul_character", "Must not contain NUL characters")
        return value


# ---- agents ----


class CapabilitiesBody(Body):
    claude_cli: bool = True
    max_concurrency: int = Field(1, ge=1, le=32)
    labels: list[Annotated[str, Field(max_length=128)]] = Field(default_factory=list, max_length=64)


class AgentBody(Body):
    name: AgentName
    url: Annotated[str, Field(max_length=2048), AfterValidator(_agent_url)] = ""
    status: AgentStatus = "unknown"
    capabilities: CapabilitiesBody | None = None
    # What workers and the reference agent also send (as to the runtime); accepted, not kept.
    ip_addrs: list[Text128] | None = Field(None, max_length=64)
    agent_version: Text128 | None = None
    os_info: Annotated[str, Field(max_length=512)] | None = None
    install_method: Annotated[str, Field(max_length=64)] | None = None


class Capabilities(BaseModel):
    claude_cli: bool
    max_concurrency: int
    labels: list[str]


class AgentOut(BaseModel):
    name: str
    url: str
    status: str
    capabilities: Capabilities
    registered_at: float
    last_seen: float | None

    @classmethod
    def of(cls, agent: Agent) -> "AgentOut":
        caps = agent.capabilities
        return cls(
            name=agent.name,
            url=agent.url,
            status=agent.status,
            capabilities=Capabilities(
                claude_cli=bool(caps.get("claude_cli", True)),
                max_concurrency=int(caps.get("max_concurrency", 1)),
                labels=list(caps.get("labels", [])),
            ),
            registered_at=agent.registered_at / 1000,
            last_seen=seconds(agent.last_seen),
        )


# ---- projects ----


class ProjectBody(Body):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")


class ProjectOut(BaseModel):
    name: str
    canonical_id: str
    created_at: float | None
    last_seen: float | None = None
    nodes_count: int = 0
    source: Literal["manual", "heartbeat"] = "manual"

    @classmethod
    def of(cls, entry: ProjectEntry) -> "ProjectOut":
        return cls(
            name=entry.name,
            canonical_id=entry.canonical_id,
            created_at=seconds(entry.created_at),
            last_seen=seconds(entry.last_seen),
            nodes_count=entry.nodes_count,
            source="manual" if entry.source == "manual" else "heartbeat",
        )


# ---- heartbeats and leadership ----


class HeartbeatBody(Body):
    node_id: Name
    canonical_id: Name
    obs_count: int | None = Field(None, ge=0, le=MAX_BIGINT)
    db_sha: Text128 | None = None
    last_seen: float | None = Field(
        None, ge=0, le=1e15, description="The node's own idea (seconds, or milliseconds)."
    )
    ip_addrs: list[Text128] = Field(default_factory=list, max_length=64)
    project_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    agent_version: Text128 | None = None


class HeartbeatReply(BaseModel):
    ok: bool = True
    role: Role
    canonical_id: str


class NodeOut(BaseModel):
    node_id: str
    canonical_id: str
    role: Role
    obs_count: int | None
    db_sha: str | None
    last_seen: float
    reported_last_seen: float | None
    ip_addrs: list[str]
    registered_at: float
    project_id: str | None
    agent_version: str | None

    @classmethod
    def of(cls, node: Node, role: Role) -> "NodeOut":
        return cls(
            node_id=node.node_id,
            canonical_id=node.canonical_id,
            role=role,
            obs_count=node.obs_count,
            db_sha=node.db_sha,
            last_seen=node.last_seen / 1000,
            reported_last_seen=seconds(node.reported_last_seen),
            ip_addrs=node.ip_addrs,
            registered_at=node.registered_at / 1000,
            project_id=node.project_id,
            agent_version=node.agent_version,
        )


class NodeSighting(BaseModel):
    node_id: str
    last_seen: float
    """Its latest heartbeat (seconds), over every project it reports."""
    projects: int


class LeadershipOut(BaseModel):
    canonical_id: str
    preferred_primary: str | None
    primary_node_id: str | None
    """The same, by the name the reference's MinIO lease and UI use."""
    needs_ui_selection: bool
    """Nodes report on the project but no primary is in force: an operator must choose."""
    node_count: int
    nodes: list[NodeOut]
    epoch: int
    issued_at: float | None
    expires_at: float | None
    lease_seconds: int | None
    expired: bool


class SelectBody(Body):
    primary_node_id: str = Field(min_length=1, max_length=128)
    lease_seconds: int = Field(3600, ge=1, le=31_536_000)


class SelectReply(BaseModel):
    ok: bool = True
    canonical_id: str
    primary_node_id: str
    lease_seconds: int
    epoch: int
    issued_at: float
    expires_at: float
    detail: str

    @classmethod
    def of(cls, choice: Leadership) -> "SelectReply":
        return cls(
            canonical_id=choice.canonical_id,
            primary_node_id=choice.primary_node_id,
            lease_seconds=choice.lease_seconds,
            epoch=choice.epoch,
            issued_at=choice.issued_at / 1000,
            expires_at=choice.expires_at / 1000,
            detail=(
                f"Leadership preference set: primary={choice.primary_node_id}. "
                f"Epoch {choice.epoch}, for {choice.lease_seconds} s; nodes learn their role "
                "from their next heartbeat, and after expiry every role is unknown until the "
                "next selection."
            ),
        )


# ---- sync ----


class SyncBody(Body):
    project: str = Field(min_length=1, max_length=128)
    agent: str = Field(min_length=1, max_length=128)


class SyncReply(BaseModel):
    """As the reference answers; `ok` false when the agent refused or failed (see the job)."""

    ok: bool
    project: str
    agent: str
    canonical_id: str
    detail: str
    job_id: str


# ---- jobs and health ----


class JobOut(BaseModel):
    id: str
    action: str
    project: str
    agent: str
    canonical_id: str
    status: str
    detail: str | None
    stdout: str | None
    stderr: str | None
    returncode: int | None
    dryrun: bool
    created_at: float
    finished_at: float | None
    request_id: str | None

    @classmethod
    def of(cls, job: Job) -> "JobOut":
        return cls(
            id=job.id,
            action=job.action,
            project=job.project,
            agent=job.agent,
            canonical_id=job.canonical_id,
            status=job.status,
            detail=job.detail,
            stdout=job.stdout,
            stderr=job.stderr,
            returncode=job.returncode,
            dryrun=job.dryrun,
            created_at=job.created_at / 1000,
            finished_at=seconds(job.finished_at),
            request_id=job.request_id,
        )


class Unreachable(BaseModel):
    """/health while the database cannot be reached (503)."""

    status: Literal["unavailable"] = "unavailable"
    service: str
    version: str
    database: Literal["unreachable"] = "unreachable"


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    service: str
    version: str
    projects: int
    agents: int
    bloom_version: str
    auth: Literal["disabled"] | None = Field(
        None, description='"disabled" when dev mode serves without an admin key; else absent.'
    )
    insecure: Literal[True] | None = Field(
        None, description="true when serving beyond loopback without a key (--insecure)."
    )
    warning: str | None = Field(None, description="Why `insecure` is true; else absent.")
