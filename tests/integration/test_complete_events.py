"""A complete that carries its attempt's last events (issue 31, item 2): stored in the
complete's own transaction after the task's earlier events, counted and bounded as the events
endpoint stores them, fenced by the complete's fence, validated (400 naming `events`), never
stored twice by a repeat; a complete without them answers as it always did."""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from bloom.db.database import resolve_database
from bloom.runtime.services.events import MAX_DATA_BYTES
from bloom.runtime.storage.tables import llm_results, task_event_totals, task_events
from tests.support.api import API, failure, success
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe
from tests.support.events import leased_task, post_events, read_all, texts


def stored(probe: DatabaseProbe, task_id: str) -> list[dict[str, Any]]:
    where = task_events.c.task_id == task_id
    return probe.rows(task_events.select().where(where).order_by(task_events.c.seq))


def total_bytes(probe: DatabaseProbe, task_id: str) -> int:
    where = task_event_totals.c.task_id == task_id
    return int(probe.scalar(select(task_event_totals.c.bytes).where(where)))


def size(event: dict[str, Any]) -> int:
    return len(event["type"].encode()) + len(orjson.dumps(event["data"]))


async def complete(client: httpx.AsyncClient, task_id: str, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{API}/llm-tasks/{task_id}/complete", json=body)


async def test_the_last_events_go_in_with_the_complete(
    client: httpx.AsyncClient, probe: DatabaseProbe, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    earlier = texts(3, "early")
    assert (await post_events(client, task_id, lease_id, earlier)).status_code == 200
    clock.advance(2)
    last = [*texts(2, "late"), {"type": "finished", "data": {"status": "success", "n": 2**62}}]
    body = success(lease_id=lease_id, worker_id="w1", events=last)
    answer = await complete(client, task_id, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["status"] == "completed"
    assert set(answer.json()) == {"task", "artifact", "result"}  # the answer is the plain one

    rows = stored(probe, task_id)
    assert [row["seq"] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert [row["type"] for row in rows] == ["text"] * 5 + ["finished"]
    assert [row["data"] for row in rows] == [e["data"] for e in [*earlier, *last]]
    assert {row["lease_id"] for row in rows} == {lease_id}
    assert {row["worker_id"] for row in rows} == {"w1"}
    (result,) = probe.rows(llm_results.select().where(llm_results.c.task_id == task_id))
    assert rows[-1]["created_at"] == result["completed_at"] == clock.now  # one moment
    assert total_bytes(probe, task_id) == sum(size(e) for e in [*earlier, *last])

    # followers get them, then the end: nothing can follow a complete
    events = await read_all(client, task_id)
    assert [e.event for e in events] == ["text"] * 5 + ["finished", "end"]
    assert events[-1].data == {"status": "completed"}

    # a repeat (the reply was lost) is answered as the first, and stores nothing again
    again = await complete(client, task_id, body)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(stored(probe, task_id)) == 6


async def test_a_failed_attempts_events_stay_with_it_and_the_retry_numbers_on(
    client: httpx.AsyncClient, probe: DatabaseProbe, clock: FakeClock
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    body = failure(lease_id=lease_id, error_code="rate_limited", events=texts(2, "first"))
    answer = await complete(client, task_id, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["status"] == "queued"
    clock.advance(120)  # past the retry's backoff
    again = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})
    second = again.json()["lease"]["id"]
    done = await complete(client, task_id, success(lease_id=second, events=texts(1, "second")))
    assert done.status_code == 200
    rows = stored(probe, task_id)
    assert [(row["seq"], row["lease_id"]) for row in rows] == [
        (1, lease_id),
        (2, lease_id),
        (3, second),
    ]


async def test_a_complete_with_claim_next_and_events(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    waiting = await client.post(
        f"{API}/llm-tasks", json={"context_id": "c2", "agent_slug": "a", "prompt": "next"}
    )
    body = success(lease_id=lease_id, events=texts(2), claim_next={"wait_seconds": 0})
    answer = await complete(client, task_id, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["next"]["task"]["id"] == waiting.json()["id"]
    assert len(stored(probe, task_id)) == 2


async def test_a_stale_lease_completes_nothing_and_stores_no_event(
    client: httpx.AsyncClient, probe: DatabaseProbe, clock: FakeClock
) -> None:
    """Expired, of another worker, unknown, superseded: refused as a complete without events is,
    and nothing of the complete or its events is kept."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    assert (await post_events(client, task_id, lease_id, texts(1))).status_code == 200
    before = probe.snapshot(task_id)
    body = success(lease_id=lease_id, events=texts(3, "stale"))

    foreign = await complete(client, task_id, body | {"worker_id": "w2"})
    assert foreign.status_code == 403
    unknown = await complete(client, task_id, body | {"lease_id": "no-such-lease"})
    assert unknown.status_code == 404
    clock.advance(31)  # a claimed lease lives 30 s until its first heartbeat
    expired = await complete(client, task_id, body)
    assert expired.status_code == 409, expired.text
    assert expired.json() == {"error": f"Lease {lease_id} is no longer active (expired)"}
    assert probe.snapshot(task_id) == before
    assert len(stored(probe, task_id)) == 1

    # the task goes back to the queue and to another lease: the old one writes nothing either
    assert await client.app.state.container.reaper.reap_once() == 1  # type: ignore[attr-defined]
    regrant = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})
    assert regrant.json()["task"]["id"] == task_id
    superseded = await complete(client, task_id, body)
    assert superseded.status_code == 409
    assert "superseded" in superseded.json()["error"]
    assert len(stored(probe, task_id)) == 1
    assert probe.count(llm_results) == 0


@pytest.mark.parametrize(
    "events",
    [
        pytest.param({"type": "x"}, id="not-a-list"),
        pytest.param(texts(501), id="501-events"),
        pytest.param([{"data": 1}], id="no-type"),
        pytest.param([{"type": ""}], id="empty-type"),
        pytest.param([{"type": "x" * 65}], id="long-type"),
        pytest.param([{"type": "a\nb"}], id="newline"),
        pytest.param([{"type": "t", "data": "x" * MAX_DATA_BYTES}], id="data-over-64KiB"),
        pytest.param([{"type": "t", "data": {"s": "nul\u0000"}}], id="data-with-nul"),
        pytest.param([{"type": "t", "data": 2**64}], id="huge-int"),
        pytest.param([{"type": "t", "data": 1, "extra": 2}], id="unknown-key"),
    ],
)
async def test_invalid_events_refuse_the_complete_with_400_naming_them(
    client: httpx.AsyncClient, probe: DatabaseProbe, events: Any
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    before = probe.snapshot(task_id)
    answer = await complete(client, task_id, success(lease_id=lease_id, events=events))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["formErrors"] == []
    assert list(error["fieldErrors"]) == ["events"]
    assert probe.snapshot(task_id) == before
    assert stored(probe, task_id) == []
    # the same complete without them goes through
    assert (await complete(client, task_id, success(lease_id=lease_id))).status_code == 200


async def test_the_largest_batch_goes_in_with_the_complete(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    batch = [*texts(499), {"type": "big", "data": "y" * (MAX_DATA_BYTES - 2)}]
    answer = await complete(client, task_id, success(lease_id=lease_id, events=batch))
    assert answer.status_code == 200, answer.text[:500]
    assert len(stored(probe, task_id)) == 500


async def test_a_complete_that_fails_in_its_transaction_keeps_none_of_its_events(
    client: httpx.AsyncClient, probe: DatabaseProbe, database_url: str, tmp_path: Path
) -> None:
    """One transaction: a result row the database refuses (a trigger, standing in for any
    failure after the events were written) rolls the events back with the rest."""
    grant = await leased_task(client)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    refuse_result(database_url, tmp_path, output="explode")
    before = probe.snapshot(task_id)
    body = success("explode", lease_id=lease_id, events=texts(4))
    answer = await complete(client, task_id, body)
    assert answer.status_code == 500, answer.text
    assert stored(probe, task_id) == []
    assert (
        probe.rows(task_event_totals.select().where(task_event_totals.c.task_id == task_id)) == []
    )
    assert probe.snapshot(task_id) == before
    fine = await complete(client, task_id, success("fine", lease_id=lease_id, events=texts(4)))
    assert fine.status_code == 200, fine.text
    assert len(stored(probe, task_id)) == 4


def refuse_result(database_url: str, data_dir: Path, *, output: str) -> None:
    """A trigger that makes the database refuse a result row with `output`."""
    target = resolve_database(database_url, data_dir)
    engine = create_engine(target.sync_url, poolclass=NullPool)
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(text(
                "CREATE TRIGGER refuse_result BEFORE INSERT ON llm_results "
                f"WHEN NEW.output = '{output}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            ))  # fmt: skip
        else:
            conn.execute(text(
                "CREATE FUNCTION refuse_result() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.output = '{output}' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$"
            ))  # fmt: skip
            conn.execute(text(
                "CREATE TRIGGER refuse_result BEFORE INSERT ON llm_results "
                "FOR EACH ROW EXECUTE FUNCTION refuse_result()"
            ))  # fmt: skip
    engine.dispose()
