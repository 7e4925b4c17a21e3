"""Memory sync asked of a node's agent: `POST /sync/pull` and `POST /sync/push`."""

import structlog
from fastapi import APIRouter

from bloom.membridge.api.deps import Sync
from bloom.membridge.api.schemas import SyncBody, SyncReply

router = APIRouter(prefix="/sync", tags=["sync"])


async def _sync(action: str, body: SyncBody, sync: Sync) -> SyncReply:
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    outcome = await sync.sync(action, body.project, body.agent, request_id)
    return SyncReply.model_validate(outcome, from_attributes=True)


@router.post(
    "/pull", response_model=SyncReply, summary="Ask the agent to pull the project's memory"
)
async def pull(body: SyncBody, sync: Sync) -> SyncReply:
    return await _sync("pull", body, sync)


@router.post(
    "/push", response_model=SyncReply, summary="Ask the agent to push the project's memory"
)
async def push(body: SyncBody, sync: Sync) -> SyncReply:
    return await _sync("push", body, sync)
