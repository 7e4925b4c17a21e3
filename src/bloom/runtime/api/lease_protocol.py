"""The lease protocol, all four calls: a worker's claim (pull) or a lease given to a worker
(push), then the attempt's heartbeats and its one complete, each fenced by the lease."""

from fastapi import APIRouter, Request, Response

from bloom.domain.errors import ServiceError
from bloom.runtime.api.deps import (
    Attempts,
    Caller,
    Dispatch,
    Leases,
    acting_worker,
    app_container,
    caller_of,
)
from bloom.runtime.api.replies import (
    AttemptEnded,
    ClaimReply,
    CompleteClaimReply,
    CompleteManyReply,
    CompleteReply,
    DispatchReply,
    HeartbeatReply,
    LeaseGrant,
)
from bloom.runtime.api.schemas import (
    ClaimBody,
    CompleteBody,
    CompleteManyBody,
    HeartbeatBody,
    LeaseBody,
)
from bloom.runtime.http import JSON, service_status
from bloom.runtime.services.attempts import Completed, Ending
from bloom.runtime.services.dispatch import DispatchFailed
from bloom.runtime.services.events import NewEvent
from bloom.runtime.services.leasing import Claimed, LeaseService, Looked
from bloom.web.hang_up import hang_up_watch

router = APIRouter()
TASKS = "/api/runtime/llm-tasks"


@router.post(
    "/api/runtime/workers/{worker_id}/claim",
    tags=["workers"],
    response_model=ClaimReply,
    responses={204: {"description": "No work arrived while waiting"}},
    summary="Long-poll for a task: an assigned lease, or the best queued task",
)
async def claim(worker_id: str, request: Request, body: ClaimBody | None = None) -> Response:
    # The cycle's four calls take their service and caller from the request, not as
    # dependencies: FastAPI solves each dependency anew per request (docs/benchmarks.md).
    leases = app_container(request).leases
    acting_worker(caller_of(request), worker_id)
    body = body or ClaimBody()
    async with hang_up_watch(request) as gone:
        claimed = await leases.claim(
            worker_id, wait_sec=body.wait_seconds, ttl_sec=body.ttl_seconds, gone=gone
        )
    if claimed is None:
        return Response(status_code=204)
    return JSON(_granted(claimed))


@router.get(
    "/api/runtime/workers/{worker_id}/leases/{lease_id}",
    tags=["workers"],
    response_model=ClaimReply,
    summary="A lease the worker holds, with its task: what a dispatched node runs",
)
async def granted(worker_id: str, lease_id: str, leases: Leases, caller: Caller) -> JSON:
    """A node told to run a lease (`POST /execute-task`) fetches it here with its own key, so
    it runs only what the runtime granted, never what the request that told it carried."""
    acting_worker(caller, worker_id)
    return JSON(_granted(await leases.granted(worker_id, lease_id)))


@router.post(
    TASKS + "/{task_id}/lease",
    tags=["leases"],
    status_code=201,
    response_model=LeaseGrant,
    summary="Lease a queued task to a worker (chosen, or picked by capacity and context)",
)
async def lease_task(
    task_id: str, leases: Leases, caller: Caller, body: LeaseBody | None = None
) -> JSON:
    body = body or LeaseBody()
    lease, worker = await leases.lease(
        task_id, worker_id=body.worker_id, ttl_sec=body.ttl_seconds, actor=caller.actor
    )
    return JSON(LeaseGrant(lease=lease, worker=worker), status_code=201)


@router.post(
    TASKS + "/{task_id}/dispatch",
    tags=["leases"],
    response_model=DispatchReply,
    summary="Lease a queued task to a node's agent and hand it over (POST /execute-task)",
)
async def dispatch_task(
    task_id: str, dispatcher: Dispatch, caller: Caller, body: LeaseBody | None = None
) -> JSON:
    body = body or LeaseBody()
    try:
        sent = await dispatcher.dispatch(
            task_id, worker_id=body.worker_id, ttl_sec=body.ttl_seconds, actor=caller.actor
        )
    except DispatchFailed as exc:
        failed = {"dispatched": False, "task_id": exc.task_id, "worker_id": exc.worker_id}
        return JSON(failed | {"error": exc.message}, status_code=502)
    return JSON(
        DispatchReply(
            dispatched=True,
            task_id=sent.task_id,
            worker_id=sent.worker_id,
            lease_id=sent.lease_id,
            execution=sent.execution,
        )
    )


@router.post(
    TASKS + "/{task_id}/heartbeat",
    tags=["leases"],
    response_model=HeartbeatReply,
    summary="Renew the lease; the reply says whether the task was cancelled",
)
async def heartbeat(task_id: str, request: Request, body: HeartbeatBody | None = None) -> JSON:
    body = body or HeartbeatBody()
    beat = await app_container(request).attempts.heartbeat(
        task_id,
        lease_id=body.lease_id,
        worker_id=acting_worker(caller_of(request), body.worker_id),
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
    TASKS + "/{task_id}/complete",
    tags=["leases"],
    response_model=CompleteReply | CompleteClaimReply,
    summary="Report the attempt's result (atomic; repeating it returns the first outcome)",
)
async def complete(task_id: str, body: CompleteBody, request: Request) -> JSON:
    services = app_container(request)
    attempts, leases, caller = services.attempts, services.leases, caller_of(request)
    following = body.claim_next
    done = await attempts.complete(
        task_id,
        body.completion(),
        lease_id=body.lease_id,
        worker_id=acting_worker(caller, body.worker_id),
        claim_next=leases.next_look(following.ttl_seconds) if following else None,
        events=[NewEvent(event.type, event.data) for event in body.events or ()],
    )
    headers = {"Idempotent-Replayed": "true"} if done.replayed else None
    if following is None:
        reply = CompleteReply(task=done.task, artifact=done.artifact, result=done.result)
        return JSON(reply, headers=headers)
    # The claim is the completing worker's own (a complete is fenced by its lease); its first
    # look ran in the complete's transaction, except on a replay. A refusal is told beside the
    # complete, which stands.
    claimed, refused = await _followed_up(
        leases, done.next, done.next_refused, done.result.worker_id, following, request
    )
    reply = CompleteClaimReply(
        task=done.task,
        artifact=done.artifact,
        result=done.result,
        next=_granted(claimed[0]) if claimed else None,
        next_error=refused,
    )
    return JSON(reply, headers=headers)


@router.post(
    "/api/runtime/workers/{worker_id}/complete",
    tags=["workers"],
    response_model=CompleteManyReply,
    summary="Report several attempts' results of one worker, and claim its next tasks",
)
async def complete_many(
    worker_id: str,
    body: CompleteManyBody,
    request: Request,
    attempts: Attempts,
    leases: Leases,
    caller: Caller,
) -> JSON:
    """One transaction for every end (each fenced by its lease, a repeat answered as first),
    then `claim_next`'s first look. When one end is refused, each is recorded alone and the
    refused ones say why; the claim then starts afresh."""
    acting_worker(caller, worker_id)
    following = body.claim_next
    endings = [Ending(item.task_id, item.completion(), item.lease_id) for item in body.completes]
    done = await attempts.complete_many(
        endings,
        worker_id,
        claim_next=leases.next_look(following.ttl_seconds, following.max_tasks)
        if following
        else None,
    )
    claimed: list[Claimed] = []
    refused = None
    if following is not None:
        claimed, refused = await _followed_up(
            leases, done.next, done.next_refused, worker_id, following, request
        )
    return JSON(
        CompleteManyReply(
            completed=[
                _ended(ending.task_id, end) for ending, end in zip(endings, done.ends, strict=True)
            ],
            next=[_granted(grant) for grant in claimed],
            next_error=refused,
        )
    )


async def _followed_up(
    leases: LeaseService,
    looked: Looked | None,
    refused: str | None,
    worker_id: str,
    following: ClaimBody,
    request: Request,
) -> tuple[list[Claimed], str | None]:
    """A `claim_next`'s grants once its complete is recorded, or why it was refused."""
    if refused is not None:
        return [], refused
    try:
        async with hang_up_watch(request) as gone:
            claimed = await leases.follow_up(
                looked,
                worker_id,
                wait_sec=following.wait_seconds,
                ttl_sec=following.ttl_seconds,
                gone=gone,
            )
    except ServiceError as exc:
        return [], exc.message
    return claimed, None


def _granted(claimed: Claimed) -> ClaimReply:
    return ClaimReply(lease=claimed.lease, task=claimed.task)


def _ended(task_id: str, end: Completed | ServiceError) -> AttemptEnded:
    if isinstance(end, ServiceError):
        return AttemptEnded(task_id, error=end.message, status_code=service_status(end))
    return AttemptEnded(
        task_id,
        task_status=end.task.status,
        result_id=end.result.id,
        artifact_id=end.artifact.id if end.artifact else None,
        replayed=end.replayed,
    )
