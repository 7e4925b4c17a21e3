"""The lease protocol: lease (push), heartbeat, complete."""

from fastapi import APIRouter

from bloom.domain.models import Completion
from bloom.runtime.api.deps import Caller, Completions, Leases, acting_worker
from bloom.runtime.api.schemas import (
    CompleteBody,
    CompleteReply,
    HeartbeatBody,
    HeartbeatReply,
    LeaseBody,
    LeaseGrant,
)
from bloom.runtime.http import JSON

router = APIRouter(prefix="/api/runtime/llm-tasks", tags=["leases"])


@router.post(
    "/{task_id}/lease",
    status_code=201,
    response_model=LeaseGrant,
    summary="Lease a queued task to a worker (chosen, or picked by capacity and context)",
)
async def lease_task(task_id: str, leases: Leases, body: LeaseBody | None = None) -> JSON:
    body = body or LeaseBody()
    lease, worker = await leases.lease(task_id, worker_id=body.worker_id, ttl_sec=body.ttl_seconds)
    return JSON(LeaseGrant(lease=lease, worker=worker), status_code=201)


@router.post(
    "/{task_id}/heartbeat",
    response_model=HeartbeatReply,
    summary="Renew the lease; the reply says whether the task was cancelled",
)
async def heartbeat(
    task_id: str, completions: Completions, caller: Caller, body: HeartbeatBody | None = None
) -> JSON:
    body = body or HeartbeatBody()
    beat = await completions.heartbeat(
        task_id, lease_id=body.lease_id, worker_id=acting_worker(caller, body.worker_id)
    )
    return JSON(
        HeartbeatReply(
            lease=beat.lease,
            expires_at=beat.lease.expires_at,
            cancel_requested=beat.cancel_requested,
            task_status=beat.task_status,
        )
    )


@router.post(
    "/{task_id}/complete",
    response_model=CompleteReply,
    summary="Report the attempt's result (atomic; repeating it returns the first outcome)",
)
async def complete(
    task_id: str, body: CompleteBody, completions: Completions, caller: Caller
) -> JSON:
    done = await completions.complete(
        task_id,
        Completion(
            status=body.status,
            output=body.output,
            error_message=body.error_message,
            metrics=body.metrics_dict(),
            artifact_type=body.artifact_type,
            artifact_tags=body.artifact_tags,
            error_code=body.error_code,
            retry_at=body.retry_at,
            session_id=body.session_id,
        ),
        lease_id=body.lease_id,
        worker_id=acting_worker(caller, body.worker_id),
    )
    headers = {"Idempotent-Replayed": "true"} if done.replayed else None
    return JSON(
        CompleteReply(task=done.task, artifact=done.artifact, result=done.result), headers=headers
    )
