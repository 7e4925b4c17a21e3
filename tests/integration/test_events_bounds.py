"""A task's live output, bounded: stored up to BLOOM_EVENTS_MAX_BYTES, then dropped with exactly
one `truncated` event while the appends are still answered 200 and the result is stored whole;
concurrent appends crossing the limit together; and the retention deleting the old events of
ended tasks, a bounded batch at a time."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bloom.runtime.container import Container
from bloom.runtime.loops import PeriodicLoop
from bloom.runtime.services import events as event_service
from bloom.runtime.services.events import MARKER_ROOM, fitting
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.tables import task_event_totals, task_events
from tests.support.api import API, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe
from tests.support.events import leased_task, post_events, read_all, texts

LIMIT = 16 * 1024
DAY = 86_400


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, events_max_bytes=LIMIT, events_retention_days=30)


def blobs(n: int, prefix: str, width: int = 1000) -> list[dict[str, Any]]:
    return [{"type": "text", "data": f"{prefix}{i}:" + "x" * width} for i in range(n)]


def size(event: dict[str, Any]) -> int:
    """An event's bytes as the runtime counts them: its type and its data as compact JSON."""
    return len(event["type"].encode()) + len(orjson.dumps(event["data"]))


def stored(probe: DatabaseProbe, task_id: str) -> list[dict[str, Any]]:
    where = task_events.c.task_id == task_id
    return probe.rows(task_events.select().where(where).order_by(task_events.c.seq))


def totals(probe: DatabaseProbe, task_id: str) -> dict[str, Any]:
    (row,) = probe.rows(task_event_totals.select().where(task_event_totals.c.task_id == task_id))
    return row


async def test_events_beyond_the_limit_are_dropped_with_one_marker_and_the_run_goes_on(
    client: httpx.AsyncClient, probe: DatabaseProbe, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    first, second, third = blobs(10, "a"), blobs(10, "b"), texts(3)
    answer = await post_events(client, task_id, lease_id, first)
    assert answer.json() == {"task_id": task_id, "last_seq": 10, "accepted": 10}

    used = sum(map(size, first))
    kept = fitting([size(e) for e in second], used, LIMIT - MARKER_ROOM)
    assert 0 < kept < len(second)
    crossing = await post_events(client, task_id, lease_id, second)
    assert crossing.status_code == 200, crossing.text  # the worker's attempt goes on
    assert crossing.json() == {"task_id": task_id, "last_seq": 10 + kept + 1, "accepted": kept}
    clock.advance(5)  # events dropped past the limit are output too: they date the newest
    after = await post_events(client, task_id, lease_id, third)
    assert after.json() == {"task_id": task_id, "last_seq": 10 + kept + 1, "accepted": 0}
    heartbeat = await client.post(
        f"{API}/llm-tasks/{task_id}/heartbeat", json={"lease_id": lease_id, "worker_id": "w1"}
    )
    assert heartbeat.status_code == 200, heartbeat.text

    events = await read_all(client, task_id)
    assert [e.event for e in events] == ["text"] * (10 + kept) + ["truncated", "end"]
    assert [e.data["data"] for e in events[: 10 + kept]] == [
        e["data"] for e in first + second[:kept]
    ]
    dropped = second[kept:] + third
    assert events[-2].data["data"] == {
        "limit_bytes": LIMIT,
        "dropped_events": len(dropped),
        "dropped_bytes": sum(map(size, dropped)),
    }
    rows = stored(probe, task_id)
    assert sum(len(r["type"].encode()) + len(orjson.dumps(r["data"])) for r in rows) <= LIMIT
    assert totals(probe, task_id) == {
        "task_id": task_id,
        "bytes": used + sum(map(size, second[:kept])),
        "dropped_events": len(dropped),
        "dropped_bytes": sum(map(size, dropped)),
        "marker_seq": 10 + kept + 1,
        "last_at": clock.now,
    }

    output = "the whole answer " * 20_000  # far beyond the events' limit
    done = await client.post(
        f"{API}/llm-tasks/{task_id}/complete", json=success(output, lease_id=lease_id)
    )
    assert done.status_code == 200, done.text
    assert (await client.get(f"{API}/llm-tasks/{task_id}")).json()["status"] == "completed"
    (artifact,) = (await client.get(f"{API}/artifacts", params={"task_id": task_id})).json()
    content = await client.get(f"{API}/artifacts/{artifact['id']}/content")
    assert content.text == output


async def test_concurrent_appends_crossing_the_limit_store_at_most_it_with_one_marker(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """12 appends of 4 events (about 48 KiB) at once to a task with 16 KiB: each append's
    stored events are the first of its own, in order; one marker, last; nothing beyond the
    limit; every event counted once, stored or dropped."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    batches = [blobs(4, f"p{n}-") for n in range(12)]
    answers = await asyncio.gather(
        *(post_events(client, task_id, lease_id, batch) for batch in batches)
    )
    assert [a.status_code for a in answers] == [200] * 12, [a.text for a in answers]

    rows = stored(probe, task_id)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["type"] for r in rows].count("truncated") == 1
    assert rows[-1]["type"] == "truncated"
    assert sum(len(r["type"].encode()) + len(orjson.dumps(r["data"])) for r in rows) <= LIMIT
    accepted = sum(a.json()["accepted"] for a in answers)
    assert accepted == len(rows) - 1
    kept = [r["data"] for r in rows[:-1]]
    for batch, answer in zip(batches, answers, strict=True):
        sent = {e["data"] for e in batch}
        assert [d for d in kept if d in sent] == [
            e["data"] for e in batch[: answer.json()["accepted"]]
        ]
    dropped = [e for batch in batches for e in batch if e["data"] not in kept]
    assert rows[-1]["data"] == {
        "limit_bytes": LIMIT,
        "dropped_events": len(dropped),
        "dropped_bytes": sum(map(size, dropped)),
    }


async def test_the_retention_deletes_old_events_of_ended_tasks_only(
    client: httpx.AsyncClient,
    clock: FakeClock,
    probe: DatabaseProbe,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Events older than 30 days of a task that has ended go, a batch per transaction and a
    bounded number of batches per pass; a task still in flight keeps its old events, and an
    ended task its recent ones."""
    container: Container = client.app.state.container  # type: ignore[attr-defined]
    assert any(
        isinstance(loop, PeriodicLoop) and loop.name == "events-retention"
        for loop in container.loops
    )

    async def ended_with(count: int) -> str:
        grant = await leased_task(client)
        task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
        await post_events(client, task_id, lease_id, texts(count))
        done = await client.post(
            f"{API}/llm-tasks/{task_id}/complete", json=success(lease_id=lease_id)
        )
        assert done.status_code == 200, done.text
        return str(task_id)

    old = await ended_with(5)
    running = await leased_task(client)
    await post_events(client, running["task"]["id"], running["lease"]["id"], texts(2))
    clock.advance(31 * DAY)
    recent = await ended_with(3)

    monkeypatch.setattr(event_service, "PRUNE_BATCH", 2)
    monkeypatch.setattr(event_service, "PRUNE_BATCHES", 2)
    assert await container.events.prune() == 4  # two batches of two, then the pass ends
    assert len(stored(probe, old)) == 1
    assert await container.events.prune() == 1
    assert await container.events.prune() == 0
    assert stored(probe, old) == []
    assert len(stored(probe, running["task"]["id"])) == 2
    assert len(stored(probe, recent)) == 3
    assert totals(probe, old)["bytes"] > 0  # the task's count stays: the limit is per task


async def test_replicas_pruning_at_once_delete_each_event_once(
    client: httpx.AsyncClient,
    container: Container,
    clock: FakeClock,
    probe: DatabaseProbe,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two runtimes on one database prune together (on PostgreSQL each passes over the rows the
    other is deleting): no error, every old event deleted once."""
    served: Container = client.app.state.container  # type: ignore[attr-defined]
    ended = []
    for _ in range(3):
        grant = await leased_task(client)
        task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
        await post_events(client, task_id, lease_id, texts(8))
        done = success(lease_id=lease_id)
        assert (await client.post(f"{API}/llm-tasks/{task_id}/complete", json=done)).is_success
        ended.append(task_id)
    clock.advance(31 * DAY)
    monkeypatch.setattr(event_service, "PRUNE_BATCH", 3)
    together = await asyncio.gather(served.events.prune(), container.events.prune())
    rest = await served.events.prune()
    assert sum(together) + rest == 24
    assert probe.count(task_events, task_events.c.task_id.in_(ended)) == 0
