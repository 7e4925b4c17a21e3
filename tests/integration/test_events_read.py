"""A task's live output, read: resumed after Last-Event-ID, streamed to the end of a finished task,
kept alive while quiet, and woken across processes on PostgreSQL."""

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from bloom.domain.models import Completion
from bloom.domain.states import ResultStatus, TaskStatus
from bloom.runtime.container import Container, build_container
from bloom.runtime.services.events import End, EventService, Keepalive, NewEvent
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage.notifications import QueueListener
from tests.support.api import API, create_task, success
from tests.support.clock import FakeClock
from tests.support.databases import fresh_postgres_url, make_settings
from tests.support.events import Sse, leased_task, parse_sse, post_events, read_all, texts
from tests.support.postgres import PostgresCluster


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
    ok = Completion(status=ResultStatus.SUCCESS, output="ok", error_message=None, metrics={})
    await container.attempts.complete(task_id, ok, lease_id=lease_id)
    # woken by the queue signal the completion sends, long before the 5 s recheck
    assert await asyncio.wait_for(anext(stream), 1) == End(TaskStatus.COMPLETED)
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
