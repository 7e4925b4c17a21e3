"""Driving a task's live output in tests: leased tasks, event batches, and Server-Sent Events
parsed as a browser reads them."""

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.api import API, claim, create_task, register_worker


@dataclass
class Sse:
    """One Server-Sent Event as the wire carries it."""

    event: str = "message"
    id: str | None = None
    data: Any = None
    comments: list[str] = field(default_factory=list)


def parse_sse(body: str) -> list[Sse]:
    """A whole SSE body (ends with a blank line) into its events; comment-only blocks are events
    with no data, so keep-alives can be seen."""
    parsed: list[Sse] = []
    for block in body.split("\n\n"):
        if not block:
            continue
        item = Sse()
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "":
                item.comments.append(value)
            elif name == "event":
                item.event = value
            elif name == "id":
                item.id = value
            elif name == "data":
                item.data = json.loads(value)
        parsed.append(item)
    return parsed


async def leased_task(http: httpx.AsyncClient, worker: str = "w1", **fields: Any) -> dict[str, Any]:
    """A task claimed by `worker` (registered here when new): {lease, task}."""
    await register_worker(http, worker, slots=4)
    task = await create_task(http, **fields)
    grant = await claim(http, worker)
    assert grant is not None
    assert grant["task"]["id"] == task["id"]
    return grant


async def post_events(
    http: httpx.AsyncClient,
    task_id: str,
    lease_id: str,
    events: list[dict[str, Any]],
    worker_id: str | None = "w1",
) -> httpx.Response:
    body = {"lease_id": lease_id, "worker_id": worker_id, "events": events}
    return await http.post(f"{API}/llm-tasks/{task_id}/events", json=body)


def texts(n: int, prefix: str = "e") -> list[dict[str, Any]]:
    return [{"type": "text", "data": f"{prefix}{i}"} for i in range(n)]


async def read_all(
    http: httpx.AsyncClient, task_id: str, headers: dict[str, str] | None = None, **params: Any
) -> list[Sse]:
    response = await http.get(
        f"{API}/llm-tasks/{task_id}/events",
        params={"follow": "false"} | params,
        headers=headers or {},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)
