"""Managed projects' request bodies (with the reference's rules) and response shapes."""

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr, field_validator
from pydantic_core import PydanticCustomError

from bloom.domain.fleet import WORKER_NAME
from bloom.domain.models import ManagedProject, ProjectNode
from bloom.domain.states import CloneStatus
from bloom.runtime.api.schemas import Body
from bloom.runtime.services.projects import NewProject

NodeId = Annotated[StrictStr, Field(pattern=WORKER_NAME, description="A worker's id.")]


class CreateProjectBody(Body):
    name: StrictStr = Field(min_length=1, max_length=256, pattern=r"^[a-zA-Z0-9_\-. ]+$")
    repo_url: StrictStr = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^(?:https?://|git@)[^\x00-\x1f\x7f]+$",
        description="`http(s)://…` or `git@…`.",
    )
    target_path: StrictStr | None = Field(
        None,
        max_length=512,
        pattern=r"^[a-zA-Z0-9_\-./~]+$",
        description="Where the agent checks it out (inside its repositories' base); no `..`.",
    )
    primary_node_id: NodeId | None = None

    @field_validator("target_path")
    @classmethod
    def _no_parent(cls, value: str | None) -> str | None:
        if value is not None and ".." in value:
            raise PydanticCustomError("path_traversal", "Must not contain '..'")
        return value

    def new_project(self) -> NewProject:
        return NewProject(self.name, self.repo_url, self.target_path, self.primary_node_id)


class CloneBody(Body):
    node_id: NodeId | None = Field(None, description="Default: the project's primary node.")


class SyncMemoryBody(Body):
    direction: Literal["push", "pull"] = "push"
    node_id: NodeId | None = Field(None, description="Default: the project's primary node.")


# Response shapes (documentation; routes render the dataclasses directly)


@dataclass(frozen=True)
class ProjectDetail(ManagedProject):
    nodes: list[ProjectNode] = field(default_factory=list)


@dataclass
class CloneReply:
    status: str
    node: str
    result: dict[str, Any] = field(metadata={"description": "The agent's answer."})


@dataclass
class NodeOutcome:
    node_id: str
    status: CloneStatus
    error: str | None = None


@dataclass
class PropagateReply:
    status: str = field(metadata={"description": "`synced`, `partial` or `nothing_to_propagate`"})
    results: list[NodeOutcome] | None = None
    message: str | None = None


@dataclass
class MemorySyncReply:
    status: str
    direction: str
    node: str
    result: dict[str, Any] = field(metadata={"description": "Membridge's answer (its sync job)."})
