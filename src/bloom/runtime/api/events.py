"""A task's live output: the worker posts events; anyone reads or follows them as Server-Sent
Events (a few streams at a time per caller)."""

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bloom.domain.errors import Forbidden
from bloom.domain.identity import Role
from bloom.domain.models import TaskEvent
from bloom.runtime.api.deps import Caller, Events, Tasks, acting_worker
from bloom.runtime.api.replies import EventsAccepted
from bloom.runtime.api.schemas import AppendEventsBody
from bloom.runtime.http import JSON, invalid
from bloom.runtime.services.events import End, Keepalive, NewEvent, StreamSlot
from bloom.web.head import is_head

router = APIRouter(prefix="/api/runtime/llm-tasks", tags=["events"])
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE = b": keepalive\n\n"
SEQ = re.compile(r"[0-9]{1,10}")
MAX_SEQ = 2**31 - 1


@router.post(
    "/{task_id}/events",
    response_model=EventsAccepted,
    summary="Append live output events (fenced by the lease; numbered 1, 2, 3… per task)",
)
async def append_events(
    task_id: str, body: AppendEventsBody, events: Events, caller: Caller
) -> JSON:
    appended = await events.append(
        task_id,
        lease_id=body.lease_id,
        worker_id=acting_worker(caller, body.worker_id),
        events=[NewEvent(event.type, event.data) for event in body.events],
    )
    return JSON(
        EventsAccepted(
            task_id=appended.task_id, last_seq=appended.last_seq, accepted=appended.accepted
        )
    )


@router.get(
    "/{task_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
    summary="Follow a task's events (Server-Sent Events; resumes after Last-Event-ID)",
)
async def stream_events(
    request: Request,
    task_id: str,
    events: Events,
    tasks: Tasks,
    caller: Caller,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_SEQ, description="Send events after this seq (Last-Event-ID wins)."),
    ] = None,
    follow: Annotated[
        bool, Query(description="Keep following until the task ends (false: what exists).")
    ] = True,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    start = after or 0
    if last_event_id is not None and last_event_id.strip():
        given = last_event_id.strip()
        if not SEQ.fullmatch(given) or int(given) > MAX_SEQ:
            return invalid("Must be an event id: an integer from 0", "Last-Event-ID")
        start = int(given)
    await events.status(task_id)  # 404 before the stream starts
    if caller.role is Role.WORKER and (await tasks.get(task_id)).worker_id != caller.worker_id:
        raise Forbidden("A worker key reads the events of its own tasks only")
    if is_head(request.scope):  # the headers a GET would get, and no endless body to drop
        return Response(media_type="text/event-stream", headers=SSE_HEADERS)
    slot = events.open_stream(caller.rate_key)  # 429 beyond the caller's streams
    stream = events.follow(task_id, after=start, follow=follow)
    return _Stream(slot, _sse(stream), media_type="text/event-stream", headers=SSE_HEADERS)


class _Stream(StreamingResponse):
    """A stream that gives its caller's slot back however it ends (finished, or the client
    gone)."""

    def __init__(self, slot: StreamSlot, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


async def _sse(stream: AsyncIterator[TaskEvent | Keepalive | End]) -> AsyncIterator[bytes]:
    async for item in stream:
        if isinstance(item, TaskEvent):
            payload = {
                "seq": item.seq,
                "type": item.type,
                "data": item.data,
                "created_at": item.created_at,
                "worker_id": item.worker_id,
                "lease_id": item.lease_id,
            }
            head = f"id: {item.seq}\nevent: {item.type}\ndata: ".encode()
            yield head + orjson.dumps(payload) + b"\n\n"
        elif isinstance(item, Keepalive):
            yield KEEPALIVE
        else:
            yield b"event: end\ndata: " + orjson.dumps({"status": item.status}) + b"\n\n"
