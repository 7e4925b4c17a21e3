"""A task's live output, appended: numbered in arrival order with gapless per-task seqs, fenced
by the lease, validated, guarded by the API key; and the NOTIFY payloads that carry it."""

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.app import create_app
from bloom.runtime.services.events import MAX_DATA_BYTES
from bloom.runtime.storage.notifications import payloads
from bloom.runtime.storage.tables import task_events
from tests.support.api import API, claim, failure, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe
from tests.support.events import leased_task, post_events, read_all, texts


def stored(probe: DatabaseProbe) -> int:
    return probe.count(task_events)


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


def test_notification_payloads_fit_postgresql() -> None:
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    chunks = payloads(ids)
    assert len(chunks) > 1
    assert all(len(chunk.encode()) < 8000 for chunk in chunks)
    assert [i for chunk in chunks for i in chunk.split("\n")] == ids
    assert payloads([]) == []
