"""Managed projects: git repositories cloned onto nodes by their agents (admins only)."""

from dataclasses import asdict

from fastapi import APIRouter

from bloom.domain.models import ManagedProject, ProjectNode
from bloom.runtime.api.deps import Caller, Projects
from bloom.runtime.api.project_schemas import (
    CloneBody,
    CloneReply,
    CreateProjectBody,
    MemorySyncReply,
    ProjectDetail,
    PropagateReply,
    SyncMemoryBody,
)
from bloom.runtime.api.replies import Removed
from bloom.runtime.http import JSON

router = APIRouter(prefix="/api/runtime/projects", tags=["projects"])
PROJECT = "/{project_id}"


@router.get("", response_model=list[ManagedProject], summary="All projects, newest first")
async def list_projects(projects: Projects) -> JSON:
    return JSON(await projects.find())


@router.post("", status_code=201, response_model=ManagedProject, summary="Create a project")
async def create_project(body: CreateProjectBody, projects: Projects, caller: Caller) -> JSON:
    return JSON(await projects.create(body.new_project(), caller.actor), status_code=201)


@router.get(PROJECT, response_model=ProjectDetail, summary="A project and its nodes' checkouts")
async def get_project(project_id: str, projects: Projects) -> JSON:
    project, nodes = await projects.get(project_id)
    return JSON(asdict(project) | {"nodes": nodes})


@router.delete(PROJECT, response_model=Removed, summary="Delete a project and its node statuses")
async def delete_project(project_id: str, projects: Projects, caller: Caller) -> JSON:
    await projects.delete(project_id, caller.actor)
    return JSON(Removed(removed=True, id=project_id))


@router.post(
    f"{PROJECT}/clone", response_model=CloneReply, summary="Clone it on a node (default: primary)"
)
async def clone_project(
    project_id: str, projects: Projects, caller: Caller, body: CloneBody | None = None
) -> JSON:
    return JSON(await projects.clone(project_id, body.node_id if body else None, caller.actor))


@router.post(
    f"{PROJECT}/propagate",
    response_model=PropagateReply,
    summary="Clone it on every node with an agent that lacks it",
)
async def propagate_project(project_id: str, projects: Projects, caller: Caller) -> JSON:
    return JSON(await projects.propagate(project_id, caller.actor))


@router.post(
    f"{PROJECT}/sync-memory",
    response_model=MemorySyncReply,
    summary="Push or pull its Claude memory on a node, through Membridge",
)
async def sync_project_memory(
    project_id: str, projects: Projects, caller: Caller, body: SyncMemoryBody | None = None
) -> JSON:
    body = body or SyncMemoryBody()
    return JSON(await projects.sync_memory(project_id, body.direction, body.node_id, caller.actor))


@router.get(
    f"{PROJECT}/node-status", response_model=list[ProjectNode], summary="Its nodes' checkouts"
)
async def project_node_status(project_id: str, projects: Projects) -> JSON:
    return JSON(await projects.nodes(project_id))
