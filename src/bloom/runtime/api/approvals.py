"""Approvals (docs/approvals.md): the tool calls waiting for a person, their decisions, and
what a resumed run applies (`/llm-tasks/{id}/decisions`, for its worker)."""

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from bloom.domain.identity import Role
from bloom.domain.paging import MAX_LIMIT
from bloom.runtime.api.deps import Approvals, Caller
from bloom.runtime.api.schemas import MAX_ID_CHARS, Body, DecisionBody, Id
from bloom.runtime.http import JSON
from bloom.runtime.services.approvals import LIST_LIMIT

router = APIRouter(prefix="/api/runtime", tags=["approvals"])

ApprovalId = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]


class TakeDecisionsBody(Body):
    lease_id: Id


@router.get("/approvals", summary="Tool calls waiting for a person, and those decided")
async def list_approvals(
    approvals: Approvals,
    status: Annotated[str | None, Query(description="pending, approved, denied, expired")] = None,
    task_id: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = LIST_LIMIT,
) -> JSON:
    found = await approvals.find(status=status, task_id=task_id, limit=limit)
    return JSON([approval.to_json() for approval in found])


@router.get("/approvals/{approval_id}", summary="One approval")
async def get_approval(approval_id: ApprovalId, approvals: Approvals) -> JSON:
    return JSON((await approvals.get(approval_id)).to_json())


@router.post(
    "/approvals/{approval_id}/decision",
    summary="Approve or deny a pending call (once): the task resumes where it stopped",
)
async def decide_approval(
    approval_id: ApprovalId, body: DecisionBody, approvals: Approvals, caller: Caller
) -> JSON:
    """409 when the approval is no longer pending (decided, expired, its task cancelled)."""
    decided = await approvals.decide(
        approval_id, body.decision, actor=caller.name, note=body.note, remember=body.remember
    )
    return JSON(decided.to_json())


@router.post(
    "/llm-tasks/{task_id}/decisions",
    summary="A run takes the decisions it applies (its worker, naming its lease)",
)
async def take_decisions(
    task_id: ApprovalId, body: TakeDecisionsBody, approvals: Approvals, caller: Caller
) -> JSON:
    """The decisions no run took yet are taken by this run's lease: an approval is used once
    (a later run, after this one was lost, is told the call was interrupted). 409 when the
    lease is not the task's current one."""
    worker = caller.worker_id if caller.role is Role.WORKER else None
    rulings = await approvals.rulings(task_id, worker_id=worker, lease_id=body.lease_id)
    return JSON({"task_id": task_id, "decisions": rulings})


@router.get(
    "/llm-tasks/{task_id}/decisions",
    summary="The decisions a task's resumed run applies (a worker: its own task's)",
)
async def task_decisions(task_id: ApprovalId, approvals: Approvals, caller: Caller) -> JSON:
    worker = caller.worker_id if caller.role is Role.WORKER else None
    rulings: list[dict[str, Any]] = await approvals.rulings(task_id, worker_id=worker)
    return JSON({"task_id": task_id, "decisions": rulings})
