"""Membridge through the runtime: the connection test, and the seed's `/api/membridge/*` proxy.

Only these routes are forwarded (no catch-all: the admin key is added here, so the runtime must
not become an open relay to any Membridge path). Path parameters are escaped before forwarding.
"""

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Body, Query, Response

from bloom.runtime.api.deps import AppContainer, Caller
from bloom.runtime.http import JSON
from bloom.runtime.services.membridge import Forwarded

router = APIRouter(tags=["membridge"])
Payload = Annotated[dict[str, Any], Body(description="Forwarded to Membridge as it is.")]


def _answer(forwarded: Forwarded) -> Response:
    if forwarded.status == 204:
        return Response(status_code=204)
    return JSON(forwarded.body, status_code=forwarded.status)


def _segment(value: str) -> str:
    return quote(value, safe="")


@router.post("/api/runtime/test-connection", summary="Check that Membridge answers (always 200)")
async def test_connection(container: AppContainer, caller: Caller) -> JSON:
    return JSON(await container.membridge.test_connection(actor=caller.name))


@router.get("/api/membridge/health", summary="Membridge's health (public)")
async def membridge_health(container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("GET", "/health"))


@router.get("/api/membridge/agents", summary="Membridge's agents")
async def list_agents(container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("GET", "/agents"))


@router.post("/api/membridge/agents", summary="Register an agent at Membridge")
async def register_agent(payload: Payload, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("POST", "/agents", json=payload))


@router.delete("/api/membridge/agents/{name}", summary="Remove an agent from Membridge")
async def remove_agent(name: str, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("DELETE", f"/agents/{_segment(name)}"))


@router.get("/api/membridge/projects", summary="Membridge's projects (manual and discovered)")
async def list_projects(container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("GET", "/projects"))


@router.post("/api/membridge/projects", summary="Create a project at Membridge")
async def create_project(payload: Payload, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("POST", "/projects", json=payload))


@router.delete("/api/membridge/projects/{name}", summary="Delete a project at Membridge")
async def delete_project(name: str, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("DELETE", f"/projects/{_segment(name)}"))


@router.get("/api/membridge/projects/{cid}/nodes", summary="A project's nodes and their roles")
async def project_nodes(cid: str, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("GET", f"/projects/{_segment(cid)}/nodes"))


@router.get("/api/membridge/projects/{cid}/leadership", summary="A project's leadership")
async def project_leadership(cid: str, container: AppContainer) -> Response:
    path = f"/projects/{_segment(cid)}/leadership"
    return _answer(await container.membridge.forward("GET", path))


@router.post(
    "/api/membridge/projects/{cid}/leadership/select", summary="Choose a project's primary"
)
async def select_primary(
    cid: str, payload: Payload, container: AppContainer, caller: Caller
) -> Response:
    path = f"/projects/{_segment(cid)}/leadership/select"
    return _answer(await container.membridge.select_leadership(path, cid, payload, caller.actor))


@router.get("/api/membridge/jobs", summary="Membridge's jobs, newest first")
async def list_jobs(
    container: AppContainer,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    project: str | None = None,
) -> Response:
    params: dict[str, Any] = {"limit": limit} | ({"project": project} if project else {})
    return _answer(await container.membridge.forward("GET", "/jobs", params=params))


@router.get("/api/membridge/jobs/{job_id}", summary="One Membridge job")
async def get_job(job_id: str, container: AppContainer) -> Response:
    return _answer(await container.membridge.forward("GET", f"/jobs/{_segment(job_id)}"))
