"""The worker registry, and the worker's long-polling claim."""

from dataclasses import fields

from fastapi import APIRouter, Request, Response

from bloom.runtime.api.deps import AppContainer, Caller, Workers, acting_worker
from bloom.runtime.api.schemas import (
    ClaimBody,
    ClaimReply,
    RegisterWorkerBody,
    Removed,
    WorkerDetail,
)
from bloom.runtime.http import JSON
from bloom.runtime.services.workers import Registration

router = APIRouter(prefix="/api/runtime/workers", tags=["workers"])


@router.get("", response_model=list[WorkerDetail], summary="All workers, with live lease counts")
async def list_workers(workers: Workers) -> JSON:
    return JSON(await workers.find())


@router.get("/{worker_id}", response_model=WorkerDetail, summary="A worker and its active leases")
async def get_worker(worker_id: str, workers: Workers) -> JSON:
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
            capabilities=body.capabilities.model_dump() if body.capabilities else None,
            ip_addrs=body.ip_addrs,
            agent_version=body.agent_version,
            os_info=body.os_info,
            install_method=body.install_method,
        )
    )
    return JSON(worker, status_code=201 if created else 200)


@router.delete("/{worker_id}", response_model=Removed, summary="Unregister; its leases end now")
async def remove_worker(worker_id: str, workers: Workers) -> JSON:
    await workers.remove(worker_id)
    return JSON(Removed(removed=True, id=worker_id))


@router.post(
    "/{worker_id}/claim",
    response_model=ClaimReply,
    responses={204: {"description": "No work arrived while waiting"}},
    summary="Long-poll for a task: an assigned lease, or the best queued task",
)
async def claim(
    worker_id: str,
    request: Request,
    container: AppContainer,
    caller: Caller,
    body: ClaimBody | None = None,
) -> Response:
    acting_worker(caller, worker_id)
    body = body or ClaimBody()
    wait = container.settings.claim_wait_sec if body.wait_seconds is None else body.wait_seconds
    claimed = await container.leases.claim(
        worker_id, wait_sec=wait, ttl_sec=body.ttl_seconds, gone=request.is_disconnected
    )
    if claimed is None:
        return Response(status_code=204)
    return JSON(ClaimReply(lease=claimed.lease, task=claimed.task))
