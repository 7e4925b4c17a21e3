"""The worker registry."""

from dataclasses import fields

from fastapi import APIRouter

from bloom.domain.identity import Role
from bloom.runtime.api.deps import AppContainer, Caller, Workers, acting_worker
from bloom.runtime.api.replies import Removed, WorkerDetail
from bloom.runtime.api.schemas import AgentUpdateBody, ApproveUrlBody, RegisterWorkerBody
from bloom.runtime.http import JSON
from bloom.runtime.services.workers import Registration

router = APIRouter(prefix="/api/runtime/workers", tags=["workers"])


@router.get("", response_model=list[WorkerDetail], summary="All workers, with live lease counts")
async def list_workers(workers: Workers) -> JSON:
    return JSON(await workers.find())


@router.get("/{worker_id}", response_model=WorkerDetail, summary="A worker and its active leases")
async def get_worker(worker_id: str, workers: Workers, caller: Caller) -> JSON:
    """A worker key reads its own worker only (the install script checks it came online)."""
    acting_worker(caller, worker_id)
    worker, leases = await workers.get(worker_id)
    detail = {f.name: getattr(worker, f.name) for f in fields(worker)}
    return JSON(detail | {"leases": leases})


@router.post(
    "",
    status_code=201,
    response_model=WorkerDetail,
    responses={200: {"description": "An existing worker, updated"}},
    summary="Register a worker (or update one with the same name)",
)
async def register_worker(body: RegisterWorkerBody, workers: Workers, caller: Caller) -> JSON:
    worker, created = await workers.register(
        Registration(
            name=acting_worker(caller, body.name) or body.name,
            url=body.url,
            status=body.status,
            capabilities=body.capabilities.model_dump(exclude_none=True)
            if body.capabilities
            else None,
            ip_addrs=body.ip_addrs,
            agent_version=body.agent_version,
            os_info=body.os_info,
            install_method=body.install_method,
        ),
        caller.actor,
        trusted=caller.role is Role.ADMIN,
    )
    return JSON(worker, status_code=201 if created else 200)


@router.post(
    "/{worker_id}/approve-url",
    response_model=WorkerDetail,
    summary="Approve the agent URL the worker (or Membridge) proposed: the runtime calls it",
)
async def approve_url(
    worker_id: str, workers: Workers, caller: Caller, body: ApproveUrlBody | None = None
) -> JSON:
    return JSON(await workers.approve_url(worker_id, body.url if body else None, caller.actor))


@router.get("/{worker_id}/agent-health", summary="Ask the worker's agent how it is (refreshes it)")
async def agent_health(worker_id: str, container: AppContainer) -> JSON:
    return JSON(await container.agents.health(worker_id))


@router.post("/{worker_id}/agent-update", summary="Have the worker's agent update itself")
async def agent_update(
    worker_id: str, container: AppContainer, caller: Caller, body: AgentUpdateBody | None = None
) -> JSON:
    repo_url = body.repo_url if body else None
    return JSON(await container.agents.update(worker_id, repo_url, caller.actor))


@router.post("/{worker_id}/agent-restart", summary="Have the worker's agent restart")
async def agent_restart(worker_id: str, container: AppContainer, caller: Caller) -> JSON:
    return JSON(await container.agents.restart(worker_id, caller.actor))


@router.post("/{worker_id}/agent-uninstall", summary="Have the worker's agent uninstall itself")
async def agent_uninstall(worker_id: str, container: AppContainer, caller: Caller) -> JSON:
    return JSON(await container.agents.uninstall(worker_id, caller.actor))


@router.delete("/{worker_id}", response_model=Removed, summary="Unregister; its leases end now")
async def remove_worker(worker_id: str, workers: Workers, caller: Caller) -> JSON:
    await workers.remove(worker_id, caller.actor)
    return JSON(Removed(removed=True, id=worker_id))
