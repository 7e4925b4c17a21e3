"""The seed's cycle served by the lean routes (web/lean_routes.py): the happy path taken by them,
everything else answered by FastAPI's routes exactly as before (on both databases)."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.types import Receive, Scope, Send

from bloom.runtime.api import tasks
from bloom.runtime.app import LEAN, create_app
from bloom.web.lean_routes import DECLINED, LeanRoutes, Unfit
from tests.support.access import ADMIN_KEY, HEADER
from tests.support.api import API, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings

KEY = {HEADER: ADMIN_KEY}
JSON = {"content-type": "application/json"}
TASK = b'{"context_id": "c1", "agent_slug": "default", "prompt": "hi"}'
LEASE = b'{"lease_id": "no-such-lease"}'
DONE = b'{"lease_id": "l", "status": "success", "output": "x", "metrics": {"duration_ms": 5}}'
MISSING = f"{API}/llm-tasks/no-such-task"
HUGE = b"0" * 20  # after a 2: past 64 bits, which orjson would read as a float

Case = tuple[str, bytes, dict[str, str]]
REFUSED: list[Case] = [
    # create: bodies FastAPI refuses, headers it refuses, the endpoint's own refusal
    (f"{API}/llm-tasks", b"{", JSON),
    (f"{API}/llm-tasks", b"[]", JSON),
    (f"{API}/llm-tasks", b"null", JSON),
    (f"{API}/llm-tasks", b"", JSON),
    (f"{API}/llm-tasks", b'{"context_id": "c1", "agent_slug": "a", "prompt": 1}', JSON),
    (f"{API}/llm-tasks", b'{"context_id": "c1", "agent_slug": "a"}', JSON),
    (f"{API}/llm-tasks", TASK[:-1] + b', "typo": 1}', JSON),
    (f"{API}/llm-tasks", b'{"context_id": "c1", "agent_slug": "a", "prompt": "a\\u0000b"}', JSON),
    (f"{API}/llm-tasks", b'{"context_id": "c1", "agent_slug": "a", "prompt": NaN}', JSON),
    (f"{API}/llm-tasks", TASK, {"content-type": "text/plain"}),
    (f"{API}/llm-tasks", TASK, {}),
    (f"{API}/llm-tasks", TASK, JSON | {"idempotency-key": "k" * 201}),
    (f"{API}/llm-tasks", TASK[:-1] + b', "idempotency_key": "a"}', JSON | {"idempotency-key": "b"}),
    # claim: a worker that does not exist, bodies refused
    (f"{API}/workers/ghost/claim", b"", JSON),
    (f"{API}/workers/ghost/claim", b'{"wait_seconds": 0}', JSON),
    (f"{API}/workers/ghost/claim", b'{"wait_seconds": "1"}', JSON),
    (f"{API}/workers/ghost/claim", b'{"wait_seconds": -1}', JSON),
    (f"{API}/workers/ghost/claim", b'{"wait": 1}', JSON),
    # heartbeat and complete: a task that does not exist, bodies refused
    (f"{MISSING}/heartbeat", LEASE, JSON),
    (f"{MISSING}/heartbeat", b"", JSON),
    (f"{MISSING}/heartbeat", b'{"lease_id": 7}', JSON),
    (f"{MISSING}/complete", DONE, JSON),
    (f"{MISSING}/complete", b"", JSON),
    (f"{MISSING}/complete", b'{"lease_id": "l", "status": "maybe"}', JSON),
    (f"{MISSING}/complete", DONE[:-1] + b', "output": "twice"}', JSON),
    (f"{MISSING}/complete", DONE[:-1] + b', "events": [{"type": "t", "data": 1e999}]}', JSON),
    (f"{MISSING}/complete", DONE[:-1] + b', "events": [{"type": "t", "data": 2%s}]}' % HUGE, JSON),
    (f"{MISSING}/complete", b"[" * 100_000 + b"]" * 100_000, JSON),
    (f"{MISSING}/complete", b'{"lease_id": "\xff"}', JSON),
]


def _without_lean(app: FastAPI) -> FastAPI:
    lean = app.router.routes.pop(0)
    assert isinstance(lean, LeanRoutes)
    return app


@pytest.fixture
async def both(
    database_url: str, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The app with its lean routes, and the same app without them, on one database."""
    settings = make_settings(database_url, tmp_path, api_key=ADMIN_KEY)
    async with AsyncExitStack() as stack:
        clients = []
        for app in (
            create_app(settings, clock=clock),
            _without_lean(create_app(settings, clock=clock)),
        ):
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            http = httpx.AsyncClient(transport=transport, base_url="http://runtime")
            clients.append(await stack.enter_async_context(http))
        yield clients[0], clients[1]


def _answer(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    headers = [(k, v) for k, v in response.headers.items() if k != "x-request-id"]
    return response.status_code, response.content, headers


async def test_what_the_lean_routes_do_not_take_is_answered_as_fastapi_answers_it(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    for path, body, headers in REFUSED:
        for key in (KEY, {}):
            sent = headers | key
            answers = [_answer(await http.post(path, content=body, headers=sent)) for http in both]
            assert answers[0] == answers[1], (path, body, sent)
            assert answers[0][0] in (400, 401, 404), (path, body, sent, answers[0])
    assert await _task_ids(both[1]) == []  # nothing was created by either


async def _task_ids(http: httpx.AsyncClient) -> list[str]:
    response = await http.get(f"{API}/llm-tasks", headers=KEY)
    return [task["id"] for task in response.json()]


class _Seen:
    """Requests the lean routes handled, and whether they handed each to FastAPI's."""

    def __init__(self, app: FastAPI):
        lean = app.router.routes[0]
        assert isinstance(lean, LeanRoutes)
        self.declined: list[bool] = []
        handle = lean.handle

        async def watched(scope: Scope, receive: Receive, send: Send) -> None:
            await handle(scope, receive, send)
            self.declined.append(bool(scope.get(DECLINED)))

        lean.handle = watched  # type: ignore[method-assign]


async def test_the_seeds_cycle_is_served_by_the_lean_routes(client: httpx.AsyncClient) -> None:
    seen = _Seen(client.app)  # type: ignore[attr-defined]
    await register_worker(client, "w1")
    for _ in range(2):
        created = await client.post(f"{API}/llm-tasks", content=TASK, headers=JSON)
        assert created.status_code == 201, created.text
    claimed = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})
    assert claimed.status_code == 200, claimed.text
    lease = claimed.json()["lease"]["id"]
    task = claimed.json()["task"]["id"]
    beat = await client.post(f"{API}/llm-tasks/{task}/heartbeat", json={"lease_id": lease})
    assert beat.status_code == 200, beat.text
    assert beat.json()["task_status"] == "running"
    done = await client.post(f"{API}/llm-tasks/{task}/complete", json=success(lease_id=lease))
    assert done.status_code == 200, done.text
    assert done.json()["task"]["status"] == "completed"
    empty = await client.post(f"{API}/workers/w1/claim", content=b"")  # an optional body
    assert empty.status_code == 200, empty.text
    refused = await client.post(f"{API}/llm-tasks", content=b"{", headers=JSON)
    assert refused.status_code == 400
    assert seen.declined == [False, False, False, False, False, False, True]


async def test_a_repeated_complete_is_answered_as_the_first(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    await client.post(f"{API}/llm-tasks", content=TASK, headers=JSON)
    claimed = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})
    lease, task = claimed.json()["lease"]["id"], claimed.json()["task"]["id"]
    answers = [
        await client.post(f"{API}/llm-tasks/{task}/complete", json=success(lease_id=lease))
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert answers[1].headers["idempotent-replayed"] == "true"


async def _list_endpoint(request: Request, limit: int = 5) -> Any:
    return None


def test_an_endpoint_of_another_shape_is_refused_at_start(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path}/unused.db", tmp_path))
    routes = [r for r in app.router.routes if not isinstance(r, LeanRoutes)]
    with pytest.raises(Unfit, match="is not served"):
        LeanRoutes(routes, [tasks.list_tasks])
    with pytest.raises(Unfit, match="not a route"):
        LeanRoutes(routes, [_list_endpoint])
    assert len(LEAN) == 4
