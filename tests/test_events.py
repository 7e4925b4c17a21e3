"""A task's live output (events: fenced appends, gapless seqs, Server-Sent Events) and the usage
limit pause of a worker, on both databases.

Appends, fencing, validation, resuming and `follow=false` run in-process on the fake clock (a
stream that ends works through httpx's ASGI transport); following, which never ends by itself,
runs against a real server process.
"""

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from bloom.db.database import DatabaseTarget, resolve_database
from bloom.domain.models import Completion
from bloom.runtime.app import create_app
from bloom.runtime.container import Container, build_container
from bloom.runtime.services.events import MAX_DATA_BYTES, End, EventService, Keepalive, NewEvent
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage.notifications import QueueListener, payloads
from bloom.runtime.storage.schema import SCHEMA
from bloom.runtime.storage.tables import task_events
from tests.conftest import fresh_postgres_url, make_settings
from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe
from tests.support.postgres import PostgresCluster
from tests.support.server import RuntimeProcess

# helpers


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


async def read_sse(lines: AsyncIterator[str]) -> AsyncIterator[Sse]:
    """Events from a live stream, as each one completes."""
    block: list[str] = []
    async for line in lines:
        if line == "":
            if block:
                (item,) = parse_sse("\n".join(block) + "\n\n")
                yield item
            block = []
        else:
            block.append(line)


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


def stored(probe: DatabaseProbe) -> int:
    return probe.count(task_events)


# appending and reading


async def test_events_are_numbered_in_arrival_order_and_read_back_as_sent(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    datas: list[Any] = [
        "plain",
        "",
        0,
        -1.5,
        None,
        True,
        [1, "two", None],
        {"nested": {"deep": ["ü", "日本", "emoji 🎉"]}, "n": 2**63 - 1},
        '"quoted" \\ back\\u0000slash\nnewline',
    ]
    first = await post_events(
        client, task_id, lease_id, [{"type": "assistant", "data": d} for d in datas[:5]]
    )
    assert first.status_code == 200, first.text
    assert first.json() == {"task_id": task_id, "last_seq": 5, "accepted": 5}
    clock.advance(1)
    second = await post_events(
        client, task_id, lease_id, [{"type": "tool_use", "data": d} for d in datas[5:]], None
    )
    assert second.json() == {"task_id": task_id, "last_seq": 9, "accepted": 4}
    empty = await post_events(client, task_id, lease_id, [])
    assert empty.json() == {"task_id": task_id, "last_seq": 9, "accepted": 0}
    missing_data = await post_events(client, task_id, lease_id, [{"type": "ping"}])
    assert missing_data.json()["last_seq"] == 10

    events = await read_all(client, task_id)
    assert [e.event for e in events] == ["assistant"] * 5 + ["tool_use"] * 4 + ["ping", "end"]
    assert [e.id for e in events[:-1]] == [str(i) for i in range(1, 11)]
    assert [e.data["data"] for e in events[:-1]] == [*datas, None]
    assert [e.data["seq"] for e in events[:-1]] == list(range(1, 11))
    assert events[0].data["created_at"] == clock.now - 1000
    assert events[5].data["created_at"] == clock.now
    assert {e.data["worker_id"] for e in events[:-1]} == {"w1"}  # the lease's, when not sent
    assert {e.data["lease_id"] for e in events[:-1]} == {lease_id}
    assert set(events[0].data) == {"seq", "type", "data", "created_at", "worker_id", "lease_id"}
    assert events[-1].id is None
    assert events[-1].data == {"status": "leased"}


async def test_seqs_continue_across_attempts(client: httpx.AsyncClient, clock: FakeClock) -> None:
    """A retried task keeps numbering where its last attempt stopped; each event names the lease
    it was sent under."""
    grant = await leased_task(client)
    task_id, first_lease = grant["task"]["id"], grant["lease"]["id"]
    await post_events(client, task_id, first_lease, texts(2))
    failed = failure(lease_id=first_lease, error_code="rate_limited")
    assert (
        await client.post(f"{API}/llm-tasks/{task_id}/complete", json=failed)
    ).status_code == 200
    clock.advance(120)
    again = await claim(client, "w1")
    assert again is not None
    assert again["task"]["id"] == task_id
    second_lease = again["lease"]["id"]
    assert (await post_events(client, task_id, second_lease, texts(2, "r"))).json()["last_seq"] == 4
    events = (await read_all(client, task_id))[:-1]
    assert [(e.data["seq"], e.data["lease_id"], e.data["data"]) for e in events] == [
        (1, first_lease, "e0"),
        (2, first_lease, "e1"),
        (3, second_lease, "r0"),
        (4, second_lease, "r1"),
    ]


async def test_resume_after_last_event_id_or_after(client: httpx.AsyncClient) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(client, task_id, lease_id, texts(6))

    def seqs(events: list[Sse]) -> list[int]:
        return [e.data["seq"] for e in events if e.event != "end"]

    assert seqs(await read_all(client, task_id, {"Last-Event-ID": "4"})) == [5, 6]
    assert seqs(await read_all(client, task_id, after=2)) == [3, 4, 5, 6]
    assert seqs(await read_all(client, task_id, {"Last-Event-ID": "5"}, after=1)) == [6]  # header
    assert seqs(await read_all(client, task_id, {"Last-Event-ID": ""}, after=3)) == [4, 5, 6]
    assert seqs(await read_all(client, task_id, {"Last-Event-ID": "6"})) == []
    assert seqs(await read_all(client, task_id, after=99)) == []
    assert seqs(await read_all(client, task_id)) == [1, 2, 3, 4, 5, 6]
    for bad in ("abc", "-1", "1.5", "99999999999"):
        response = await client.get(
            f"{API}/llm-tasks/{task_id}/events",
            params={"follow": "false"},
            headers={"Last-Event-ID": bad},
        )
        assert response.status_code == 400, bad
        assert "Last-Event-ID" in response.json()["error"]["fieldErrors"]
    for params in ({"after": "-1"}, {"after": "x"}, {"follow": "maybe"}):
        response = await client.get(f"{API}/llm-tasks/{task_id}/events", params=params)
        assert response.status_code == 400, params
        assert response.json()["error"]["fieldErrors"]


async def test_a_finished_task_streams_its_events_then_ends_even_when_following(
    client: httpx.AsyncClient,
) -> None:
    """Following a task that has ended sends what exists and the end event at once."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(client, task_id, lease_id, texts(3))
    done = success(lease_id=lease_id)
    assert (await client.post(f"{API}/llm-tasks/{task_id}/complete", json=done)).status_code == 200
    response = await client.get(f"{API}/llm-tasks/{task_id}/events")  # follow defaults to true
    events = parse_sse(response.text)
    assert [e.event for e in events] == ["text", "text", "text", "end"]
    assert events[-1].data == {"status": "completed"}
    cancelled = await create_task(client)
    assert (await client.post(f"{API}/llm-tasks/{cancelled['id']}/cancel")).status_code == 200
    events = parse_sse((await client.get(f"{API}/llm-tasks/{cancelled['id']}/events")).text)
    assert [(e.event, e.data) for e in events] == [("end", {"status": "cancelled"})]


async def test_unknown_tasks_are_404(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{API}/llm-tasks/nope/events")
    assert response.status_code == 404
    assert response.json() == {"error": "Task not found"}
    assert response.headers["content-type"] == "application/json"
    posted = await post_events(client, "nope", "some-lease", texts(1))
    assert posted.status_code == 404
    assert posted.json() == {"error": "Task not found"}


# fencing


async def test_appends_are_fenced_by_the_lease(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    """A lease that is unknown, another task's, another worker's, expired or released is refused
    (404, 403 or 409, as heartbeat and complete refuse it) and nothing is stored."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    other = await leased_task(client)
    assert (await post_events(client, task_id, lease_id, texts(1))).status_code == 200
    assert stored(probe) == 1

    unknown = await post_events(client, task_id, "no-such-lease", texts(1))
    assert (unknown.status_code, unknown.json()) == (404, {"error": "Task or lease not found"})
    of_other_task = await post_events(client, task_id, other["lease"]["id"], texts(1))
    assert of_other_task.status_code == 404
    foreign = await post_events(client, task_id, lease_id, texts(1), worker_id="w2")
    assert foreign.status_code == 403
    assert foreign.json() == {"error": f"Lease {lease_id} is held by worker 'w1', not 'w2'"}
    assert stored(probe) == 1

    clock.advance(31)  # a claimed lease lives 30 s until the first heartbeat
    expired = await post_events(client, task_id, lease_id, texts(1))
    assert expired.status_code == 409
    assert expired.json() == {"error": f"Lease {lease_id} is no longer active (expired)"}
    assert stored(probe) == 1

    beat = await client.post(f"{API}/llm-tasks/{other['task']['id']}/heartbeat")
    assert beat.status_code == 409  # expired too
    fresh = await leased_task(client)
    done = success(lease_id=fresh["lease"]["id"])
    completed = await client.post(f"{API}/llm-tasks/{fresh['task']['id']}/complete", json=done)
    assert completed.status_code == 200
    released = await post_events(client, fresh["task"]["id"], fresh["lease"]["id"], texts(1))
    assert released.status_code == 409
    assert released.json() == {
        "error": f"Lease {fresh['lease']['id']} is no longer active (released)"
    }
    assert stored(probe) == 1


async def test_a_requeued_task_refuses_its_old_lease(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(client, task_id, lease_id, texts(1))
    reaped = await client.app.state.container.reaper.reap_once()  # type: ignore[attr-defined]
    assert reaped == 0
    clock.advance(31)
    assert await client.app.state.container.reaper.reap_once() == 1  # type: ignore[attr-defined]
    assert (await client.get(f"{API}/llm-tasks/{task_id}")).json()["status"] == "queued"
    stale = await post_events(client, task_id, lease_id, texts(1))
    assert stale.status_code == 409
    assert stored(probe) == 1


# validation


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"events": []}, "lease_id", id="no-lease"),
        pytest.param({"lease_id": "", "events": []}, "lease_id", id="empty-lease"),
        pytest.param({"lease_id": 5, "events": []}, "lease_id", id="lease-not-a-string"),
        pytest.param({"lease_id": "l"}, "events", id="no-events"),
        pytest.param({"lease_id": "l", "events": {"type": "x"}}, "events", id="not-a-list"),
        pytest.param({"lease_id": "l", "events": texts(501)}, "events", id="501-events"),
        pytest.param({"lease_id": "l", "events": [{"data": 1}]}, "events", id="no-type"),
        pytest.param({"lease_id": "l", "events": [{"type": ""}]}, "events", id="empty-type"),
        pytest.param({"lease_id": "l", "events": [{"type": "x" * 65}]}, "events", id="long-type"),
        pytest.param({"lease_id": "l", "events": [{"type": "a\nb"}]}, "events", id="newline"),
        pytest.param({"lease_id": "l", "events": [{"type": 3}]}, "events", id="type-number"),
        pytest.param(
            {"lease_id": "l", "events": [{"type": "t", "data": "x" * MAX_DATA_BYTES}]},
            "events",
            id="data-over-64KiB",
        ),
        pytest.param(
            {"lease_id": "l", "events": [{"type": "t", "data": {"s": "nul\u0000"}}]},
            "events",
            id="data-with-nul",
        ),
        pytest.param(
            {"lease_id": "l", "events": [{"type": "t", "data": 2**64}]}, "events", id="huge-int"
        ),
        pytest.param({"lease_id": "l", "worker_id": "", "events": []}, "worker_id", id="worker"),
    ],
)
async def test_invalid_appends_are_400_in_the_flattened_shape(
    client: httpx.AsyncClient, probe: DatabaseProbe, body: dict[str, Any], field: str
) -> None:
    grant = await leased_task(client)
    task_id = grant["task"]["id"]
    if body.get("lease_id") == "l":
        body = body | {"lease_id": grant["lease"]["id"]}
    response = await client.post(f"{API}/llm-tasks/{task_id}/events", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["formErrors"] == []
    assert list(error["fieldErrors"]) == [field]
    assert stored(probe) == 0


async def test_the_largest_allowed_batch_is_accepted(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """500 events, one of them just under 64 KiB serialised, go in one append."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    big = "y" * (MAX_DATA_BYTES - 2)  # plus its two quotes: exactly the limit
    batch = [*texts(499), {"type": "big", "data": big}]
    response = await post_events(client, task_id, lease_id, batch)
    assert response.status_code == 200, response.text[:500]
    assert response.json()["last_seq"] == 500
    assert stored(probe) == 500
    events = await read_all(client, task_id, after=498)
    assert [e.data["data"] for e in events[:-1]] == ["e498", big]


async def test_a_body_that_is_not_json_is_400(client: httpx.AsyncClient) -> None:
    grant = await leased_task(client)
    response = await client.post(
        f"{API}/llm-tasks/{grant['task']['id']}/events",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["formErrors"] == ["Malformed JSON body"]


# auth


async def test_events_routes_need_the_api_key(
    database_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    key = "events-key-0123456789"
    app = create_app(make_settings(database_url, tmp_path, api_key=key), clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            for method in ("GET", "POST"):
                response = await http.request(method, f"{API}/llm-tasks/t1/events", json={})
                assert response.status_code == 401
                assert response.json() == {"error": "Unauthorized"}
            http.headers["X-Runtime-API-Key"] = key
            assert (await http.get(f"{API}/llm-tasks/t1/events")).status_code == 404


# the service: keep-alives, and wake-ups across processes


async def lease_through_services(container: Container) -> tuple[str, str]:
    """A task claimed by worker w1, through the services: (task id, lease id)."""
    capabilities = {"claude_cli": True, "max_concurrency": 1, "labels": []}
    await container.workers.register(Registration(name="w1", capabilities=capabilities))
    task, _ = await container.tasks.create(NewTask(context_id="c", agent_slug="a", prompt="p"))
    claimed = await container.leases.claim("w1", wait_sec=0)
    assert claimed is not None
    assert claimed.task.id == task.id
    return task.id, claimed.lease.id


async def test_following_sends_keepalives_while_quiet_and_ends_with_the_task(
    container: Container, clock: FakeClock
) -> None:
    task_id, lease_id = await lease_through_services(container)
    events = EventService(
        container.db,
        container.events.signal,
        container.signal,
        clock,
        keepalive_sec=0.2,
        recheck_sec=5,
    )
    stream = events.follow(task_id)
    started = time.monotonic()
    assert isinstance(await asyncio.wait_for(anext(stream), 2), Keepalive)
    assert 0.15 < time.monotonic() - started < 1.5
    assert isinstance(await asyncio.wait_for(anext(stream), 2), Keepalive)
    await container.events.append(task_id, lease_id=lease_id, worker_id=None, events=[])
    appended = await container.events.append(
        task_id, lease_id=lease_id, worker_id="w1", events=[NewEvent("text", "hello")]
    )
    assert appended.last_seq == 1
    event = await asyncio.wait_for(anext(stream), 1)  # woken at once, not at the recheck
    assert not isinstance(event, Keepalive | End)
    assert (event.seq, event.data) == (1, "hello")
    ok = Completion(status="success", output="ok", error_message=None, metrics={})
    await container.attempts.complete(task_id, ok, lease_id=lease_id)
    # woken by the queue signal the completion sends, long before the 5 s recheck
    assert await asyncio.wait_for(anext(stream), 1) == End("completed")
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_an_append_in_one_process_wakes_followers_in_another(
    postgres: PostgresCluster, tmp_path: Path, clock: FakeClock
) -> None:
    """PostgreSQL: two runtimes on one database; events appended through one wake the other's
    followers through NOTIFY, well before any recheck."""
    settings = make_settings(fresh_postgres_url(postgres), tmp_path)
    here, there = build_container(settings, clock), build_container(settings, clock)
    (listener,) = [loop for loop in here.loops if isinstance(loop, QueueListener)]
    try:
        task_id, lease_id = await lease_through_services(there)
        listening = here.events.signal.waiter(task_id)
        running = asyncio.create_task(listener.run())
        await asyncio.wait_for(listening.wait(), 10)  # connected: it wakes everyone once
        woken = here.events.signal.waiter(task_id)
        started = time.monotonic()
        await there.events.append(
            task_id, lease_id=lease_id, worker_id="w1", events=[NewEvent("text", "over there")]
        )
        await asyncio.wait_for(woken.wait(), 2)
        assert time.monotonic() - started < 1
        (event,) = await here.events.after(task_id, 0)
        assert event.data == "over there"
        listener.stop()
        await asyncio.wait_for(running, 5)
    finally:
        await here.db.dispose()
        await there.db.dispose()


def test_notification_payloads_fit_postgresql() -> None:
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    chunks = payloads(ids)
    assert len(chunks) > 1
    assert all(len(chunk.encode()) < 8000 for chunk in chunks)
    assert [i for chunk in chunks for i in chunk.split("\n")] == ids
    assert payloads([]) == []


# a real server: concurrent appends, following


@pytest.fixture
async def server(runtime_process: RuntimeProcess) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=runtime_process.url, limits=limits, timeout=30) as http:
        yield http


async def test_concurrent_appends_get_gapless_consecutive_seqs(
    server: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """20 appends of 5 events at once to one task: seqs 1..100 without gaps or repeats, each
    append's events consecutive and in the order sent."""
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await asyncio.gather(*(server.get(f"{API}/health") for _ in range(20)))  # warm connections
    gate = asyncio.Event()

    async def append(n: int) -> httpx.Response:
        await gate.wait()
        return await post_events(server, task_id, lease_id, texts(5, f"b{n}-"))

    pending = [asyncio.create_task(append(n)) for n in range(20)]
    await asyncio.sleep(0)
    gate.set()
    responses = await asyncio.gather(*pending)
    assert [r.status_code for r in responses] == [200] * 20, [r.text for r in responses]
    last_seqs = sorted(r.json()["last_seq"] for r in responses)
    assert last_seqs == list(range(5, 101, 5))
    rows = probe.rows(
        task_events.select().where(task_events.c.task_id == task_id).order_by(task_events.c.seq)
    )
    assert [row["seq"] for row in rows] == list(range(1, 101))
    for n, response in enumerate(responses):
        last = response.json()["last_seq"]
        assert [row["data"] for row in rows[last - 5 : last]] == [f"b{n}-{i}" for i in range(5)]


async def test_following_delivers_new_events_at_once_and_ends_when_the_task_completes(
    server: httpx.AsyncClient, runtime_process: RuntimeProcess
) -> None:
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(server, task_id, lease_id, texts(2))
    url = f"{API}/llm-tasks/{task_id}/events"
    timeout = httpx.Timeout(10, read=None)
    async with server.stream("GET", url, headers={"Last-Event-ID": "1"}, timeout=timeout) as live:
        assert live.status_code == 200
        assert live.headers["content-type"].startswith("text/event-stream")
        assert live.headers["cache-control"] == "no-cache"
        events = read_sse(live.aiter_lines())
        resumed = await asyncio.wait_for(anext(events), 5)
        assert (resumed.id, resumed.event, resumed.data["data"]) == ("2", "text", "e1")

        for seq in (3, 4):
            started = time.monotonic()
            sent = await post_events(server, task_id, lease_id, [{"type": "live", "data": seq}])
            assert sent.json()["last_seq"] == seq
            arrived = await asyncio.wait_for(anext(events), 1)
            assert time.monotonic() - started < 1
            assert (arrived.id, arrived.event, arrived.data["data"]) == (str(seq), "live", seq)

        # A reader that hangs up mid-stream is let go cleanly.
        async with server.stream("GET", url, timeout=timeout) as dropped:
            first = await asyncio.wait_for(anext(read_sse(dropped.aiter_lines())), 5)
            assert first.id == "1"

        done = success(lease_id=lease_id, worker_id="w1")
        completed = await server.post(f"{API}/llm-tasks/{task_id}/complete", json=done)
        assert completed.status_code == 200
        end = await asyncio.wait_for(anext(events), 2)
        assert (end.event, end.data) == ("end", {"status": "completed"})
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(events), 2)  # the server closed the stream

    snapshot = await server.get(url, params={"follow": "false"})
    assert [e.id for e in parse_sse(snapshot.text)] == ["1", "2", "3", "4", None]
    assert (await server.get(f"{API}/health")).status_code == 200
    log = runtime_process.log()
    assert "Traceback" not in log
    assert "unhandled_error" not in log


async def test_follow_false_closes_on_a_live_task(server: httpx.AsyncClient) -> None:
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(server, task_id, lease_id, texts(2))
    response = await asyncio.wait_for(
        server.get(f"{API}/llm-tasks/{task_id}/events", params={"follow": "false"}), 5
    )
    events = parse_sse(response.text)
    assert [(e.id, e.event) for e in events] == [("1", "text"), ("2", "text"), (None, "end")]
    assert events[-1].data == {"status": "leased"}
    missing = await server.get(f"{API}/llm-tasks/nope/events")
    assert (missing.status_code, missing.json()) == (404, {"error": "Task not found"})


# the usage-limit pause


async def usage_limited(
    http: httpx.AsyncClient, task_id: str, lease_id: str, retry_at: int
) -> dict[str, Any]:
    body = failure(
        "Claude usage limit reached",
        lease_id=lease_id,
        worker_id="w1",
        error_code="usage_limit",
        retry_at=retry_at,
    )
    response = await http.post(f"{API}/llm-tasks/{task_id}/complete", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def worker_json(http: httpx.AsyncClient, worker: str) -> dict[str, Any]:
    listed = {w["id"]: w for w in (await http.get(f"{API}/workers")).json()}
    detail = (await http.get(f"{API}/workers/{worker}")).json()
    assert detail["paused_until"] == listed[worker]["paused_until"]
    return dict(detail)


async def test_a_usage_limit_pauses_the_worker_until_the_reset(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    assert (await worker_json(client, "w1"))["paused_until"] is None
    reset = clock.now + 3_600_000
    done = await usage_limited(client, task_id, lease_id, reset)
    task = done["task"]
    assert (task["status"], task["not_before"], task["attempts"]) == ("queued", reset, 0)
    assert (await worker_json(client, "w1"))["paused_until"] == reset
    actions = [e["action"] for e in (await client.get(f"{API}/audit")).json()]
    assert "worker_paused" in actions

    other = await create_task(client, context_id="ctx-2")
    assert await claim(client, "w1") is None  # 204, though `other` is claimable
    no_worker = await client.post(f"{API}/llm-tasks/{other['id']}/lease")
    assert no_worker.status_code == 503
    assert no_worker.json() == {"error": "No available worker with free capacity"}
    named = await client.post(f"{API}/llm-tasks/{other['id']}/lease", json={"worker_id": "w1"})
    assert named.status_code == 503
    assert named.json() == {"error": f"Worker 'w1' is paused until {reset}"}

    await register_worker(client, "w1", slots=4)  # re-registering does not lift the pause
    assert (await worker_json(client, "w1"))["paused_until"] == reset
    assert await claim(client, "w1") is None

    clock.advance(3599)
    assert await claim(client, "w1") is None
    clock.advance(1)  # the reset: the pause lapses by itself
    grants = [await claim(client, "w1"), await claim(client, "w1")]
    assert {g["task"]["id"]: g["task"]["attempts"] for g in grants if g} == {
        task_id: 1,
        other["id"]: 1,
    }
    assert (await worker_json(client, "w1"))["paused_until"] == reset  # kept; it has lapsed


async def test_the_router_skips_a_paused_worker(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """The seed's lease picks another worker (even one with fewer free slots); a success by the
    paused worker does not lift its pause."""
    await register_worker(client, "w1", slots=4)
    first = await create_task(client)
    second = await create_task(client)
    grant_a, grant_b = await claim(client, "w1"), await claim(client, "w1")
    assert grant_a is not None
    assert grant_b is not None
    await register_worker(client, "w2", slots=1)
    reset = clock.now + 600_000
    await usage_limited(client, first["id"], grant_a["lease"]["id"], reset)
    done = success(lease_id=grant_b["lease"]["id"])
    assert (
        await client.post(f"{API}/llm-tasks/{second['id']}/complete", json=done)
    ).status_code == 200
    assert (await worker_json(client, "w1"))["paused_until"] == reset

    third = await create_task(client)
    leased = await client.post(f"{API}/llm-tasks/{third['id']}/lease")
    assert leased.status_code == 201
    assert leased.json()["worker"]["id"] == "w2"
    fourth = await create_task(client)
    full = await client.post(f"{API}/llm-tasks/{fourth['id']}/lease")
    assert full.status_code == 503
    clock.advance(601)
    back = await client.post(f"{API}/llm-tasks/{fourth['id']}/lease")
    assert back.status_code == 201
    assert back.json()["worker"]["id"] == "w1"


async def test_a_paused_context_owner_does_not_hold_its_context_back(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """Tasks of a context go to the worker that last held it, for a while; not while it is
    paused: another worker takes them at once."""
    grant = await leased_task(client, context_id="ctx-shared")
    await register_worker(client, "w2", slots=1)
    follow_up = await create_task(client, context_id="ctx-shared")
    assert await claim(client, "w2") is None  # sticky: left to w1, which has a free slot
    await usage_limited(client, grant["task"]["id"], grant["lease"]["id"], clock.now + 600_000)
    taken = await claim(client, "w2")
    assert taken is not None
    assert taken["task"]["id"] == follow_up["id"]


async def test_a_usage_limit_without_a_future_reset_pauses_nothing(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    await usage_limited(client, grant["task"]["id"], grant["lease"]["id"], clock.now - 1)
    assert (await worker_json(client, "w1"))["paused_until"] is None
    other = await leased_task(client)
    body = failure(lease_id=other["lease"]["id"], error_code="rate_limited", retry_at=clock.now + 5)
    await client.post(f"{API}/llm-tasks/{other['task']['id']}/complete", json=body)
    assert (await worker_json(client, "w1"))["paused_until"] is None


# the migration


def _create_empty(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> DatabaseTarget:
    if kind == "sqlite":
        return resolve_database(f"sqlite:///{tmp_path / 'm.db'}", tmp_path)
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    name = f"m3_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return resolve_database(cluster.url(name), tmp_path)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0003_keeps_workers_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _create_empty(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0002")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workers (id, node_id, capabilities, ip_addrs, registered_at) "
                    "VALUES ('w1', 'w1', '{}', '[]', 1)"
                )
            )
        SCHEMA.upgrade(target, "0003")
        assert SCHEMA.current_revision(target) == "0003"
        with engine.connect() as conn:
            assert list(conn.execute(text("SELECT id, paused_until FROM workers"))) == [
                ("w1", None)
            ]
            assert "task_events" in inspect(conn).get_table_names()
        command.downgrade(SCHEMA.alembic_config(target), "0002")
        with engine.connect() as conn:
            inspector = inspect(conn)
            assert "task_events" not in inspector.get_table_names()
            columns = {c["name"] for c in inspector.get_columns("workers")}
            assert "paused_until" not in columns
            assert list(conn.execute(text("SELECT id FROM workers"))) == [("w1",)]
    finally:
        engine.dispose()
