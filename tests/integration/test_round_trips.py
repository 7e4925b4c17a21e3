"""Fewer round trips: tasks queued in a batch, and a complete that claims the worker's next task
(on both databases)."""

import asyncio
from typing import Any

import httpx

from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock

BATCH = f"{API}/llm-tasks/batch"


def item(n: int, **fields: Any) -> dict[str, Any]:
    return {"context_id": f"ctx-{n}", "agent_slug": "default", "prompt": f"task {n}"} | fields


async def audit_actions(client: httpx.AsyncClient, task_id: str) -> list[str]:
    entries = (await client.get(f"{API}/audit", params={"task_id": task_id})).json()
    return [entry["action"] for entry in entries][::-1]


async def task_count(client: httpx.AsyncClient) -> int:
    return len((await client.get(f"{API}/llm-tasks")).json())


async def test_a_batch_queues_every_task_in_order(client: httpx.AsyncClient) -> None:
    response = await client.post(BATCH, json={"tasks": [item(n, priority=n) for n in range(5)]})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["created"] == 5
    assert [task["prompt"] for task in body["tasks"]] == [f"task {n}" for n in range(5)]
    assert {task["status"] for task in body["tasks"]} == {"queued"}
    for task in body["tasks"]:
        stored = (await client.get(f"{API}/llm-tasks/{task['id']}")).json()
        assert stored == task
        assert await audit_actions(client, task["id"]) == ["task_created"]
    await register_worker(client, "w1")
    first = await claim(client, "w1")
    assert first is not None
    assert first["task"]["prompt"] == "task 4"  # priority still rules


async def test_a_batch_is_all_or_nothing(client: httpx.AsyncClient) -> None:
    bad = await client.post(BATCH, json={"tasks": [item(1), item(2, max_attempts=0)]})
    assert bad.status_code == 400
    assert "tasks" in bad.json()["error"]["fieldErrors"]
    empty = await client.post(BATCH, json={"tasks": []})
    too_many = await client.post(BATCH, json={"tasks": [item(n) for n in range(1001)]})
    assert (empty.status_code, too_many.status_code) == (400, 400)
    await create_task(client, idempotency_key="k-1")
    reused = await client.post(
        BATCH, json={"tasks": [item(1), item(2, idempotency_key="k-1", prompt="other")]}
    )
    assert reused.status_code == 409
    assert "k-1" in reused.json()["error"]
    assert await task_count(client) == 1  # the first item went back with the refusal


async def test_a_batch_answers_known_keys_with_their_tasks(client: httpx.AsyncClient) -> None:
    tasks = [item(1, idempotency_key="a"), item(2, idempotency_key="b")]
    first = await client.post(BATCH, json={"tasks": tasks})
    again = await client.post(BATCH, json={"tasks": tasks})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json() | {"created": 0}
    mixed = await client.post(BATCH, json={"tasks": [*tasks, item(3)]})
    assert (mixed.status_code, mixed.json()["created"]) == (201, 1)
    assert await task_count(client) == 3


async def complete_next(
    client: httpx.AsyncClient, task_id: str, wait: float = 0, **fields: Any
) -> httpx.Response:
    body = success(claim_next={"wait_seconds": wait}) | fields
    return await client.post(f"{API}/llm-tasks/{task_id}/complete", json=body)


async def test_a_complete_claims_the_workers_next_task(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    first = await create_task(client, prompt="first")
    second = await create_task(client, prompt="second")
    got = await claim(client, "w1")
    assert got is not None
    assert got["task"]["id"] == first["id"]

    done = await complete_next(client, first["id"])
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["task"]["status"] == "completed"
    assert body["result"]["status"] == "success"
    assert body["next"]["task"]["id"] == second["id"]
    assert body["next"]["lease"]["worker_id"] == "w1"
    assert body["next_error"] is None
    assert await audit_actions(client, second["id"]) == ["task_created", "task_leased"]

    last = await complete_next(client, second["id"])
    assert last.status_code == 200
    assert (last.json()["task"]["status"], last.json()["next"]) == ("completed", None)


async def test_a_plain_complete_answers_as_before(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    await create_task(client)
    await claim(client, "w1")
    done = await client.post(f"{API}/llm-tasks/{task['id']}/complete", json=success())
    assert set(done.json()) == {"task", "artifact", "result"}
    assert len((await client.get(f"{API}/leases")).json()) == 1  # nothing else was claimed


async def test_the_next_claim_long_polls(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    await claim(client, "w1")
    waiting = asyncio.create_task(complete_next(client, task["id"], wait=10))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    later = await create_task(client, prompt="later")
    done = await asyncio.wait_for(waiting, 5)
    assert done.json()["next"]["task"]["id"] == later["id"]


async def test_a_refused_complete_claims_nothing(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    waiting = await create_task(client)
    got = await claim(client, "w1")
    assert got is not None
    stale = await complete_next(client, task["id"], lease_id="not-the-lease")
    assert stale.json() == {"error": "Task or lease not found"}
    assert (await client.get(f"{API}/llm-tasks/{waiting['id']}")).json()["status"] == "queued"


async def test_a_claim_refused_after_the_complete_is_told_beside_it(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    await claim(client, "w1")
    # The worker registers again without Claude CLI while its attempt runs: the complete stands,
    # the claim cannot be made.
    await register_worker(client, "w1", capabilities={"claude_cli": False})
    done = await complete_next(client, task["id"])
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["task"]["status"] == "completed"
    assert body["next"] is None
    assert body["next_error"] == "Worker 'w1' does not run Claude CLI tasks"


async def test_a_repeated_complete_claims_as_a_claim_would(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    first = await create_task(client, prompt="first")
    second = await create_task(client, prompt="second")
    third = await create_task(client, prompt="third")
    await claim(client, "w1")
    done = await complete_next(client, first["id"])
    assert done.json()["next"]["task"]["id"] == second["id"]
    again = await complete_next(client, first["id"])
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["task"] == done.json()["task"]
    # its one slot holds the second task's lease: nothing more for it, nothing refused
    assert (again.json()["next"], again.json()["next_error"]) == (None, None)
    assert (await client.get(f"{API}/llm-tasks/{third['id']}")).json()["status"] == "queued"


async def test_a_complete_that_pauses_its_worker_claims_nothing(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    waiting = await create_task(client)
    await claim(client, "w1")
    limited = failure(
        "usage limit reached", error_code="usage_limit", retry_at=clock.now + 3_600_000
    )
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete",
        json=limited | {"claim_next": {"wait_seconds": 0}},
    )
    assert done.status_code == 200, done.text
    assert (done.json()["next"], done.json()["next_error"]) == (None, None)
    worker = (await client.get(f"{API}/workers/w1")).json()
    assert worker["paused_until"] == clock.now + 3_600_000
    assert (await client.get(f"{API}/llm-tasks/{waiting['id']}")).json()["status"] == "queued"


async def complete_many(
    client: httpx.AsyncClient, worker: str, ends: list[dict[str, Any]], **claim_next: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"completes": ends}
    if claim_next:
        body["claim_next"] = claim_next
    response = await client.post(f"{API}/workers/{worker}/complete", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def claimed_tasks(client: httpx.AsyncClient, worker: str, count: int) -> list[str]:
    grants = [await claim(client, worker) for _ in range(count)]
    return [grant["task"]["id"] for grant in grants if grant is not None]


async def artifacts_of(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    return list((await client.get(f"{API}/artifacts", params={"task_id": task_id})).json())


async def test_a_worker_completes_several_and_claims_its_next_ones(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1", slots=3)
    queued = [(await create_task(client, prompt=f"task {n}"))["id"] for n in range(6)]
    held = await claimed_tasks(client, "w1", 3)
    assert held == queued[:3]

    body = await complete_many(
        client,
        "w1",
        [success(f"out {n}", task_id=task) for n, task in enumerate(held)],
        wait_seconds=0,
        max_tasks=3,
    )
    assert [end["task_id"] for end in body["completed"]] == held
    assert {end["task_status"] for end in body["completed"]} == {"completed"}
    assert not any(end["replayed"] or end["error"] for end in body["completed"])
    assert [grant["task"]["id"] for grant in body["next"]] == queued[3:]
    assert {grant["lease"]["worker_id"] for grant in body["next"]} == {"w1"}
    assert body["next_error"] is None
    for n, task in enumerate(held):
        [artifact] = await artifacts_of(client, task)
        assert artifact["id"] == body["completed"][n]["artifact_id"]
        assert artifact["content"] == f"out {n}"
        assert "task_completed" in await audit_actions(client, task)
    for task in queued[3:]:
        assert await audit_actions(client, task) == ["task_created", "task_leased"]


async def test_the_next_claims_fill_free_slots_only(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1", slots=2)
    queued = [(await create_task(client))["id"] for _ in range(5)]
    [held] = await claimed_tasks(client, "w1", 1)
    body = await complete_many(client, "w1", [success(task_id=held)], wait_seconds=0, max_tasks=5)
    assert [grant["task"]["id"] for grant in body["next"]] == queued[1:3]
    leases = (await client.get(f"{API}/leases")).json()
    assert sum(lease["status"] == "active" for lease in leases) == 2


async def test_a_repeated_batch_answers_its_first_outcome(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1", slots=2)
    for _ in range(2):
        await create_task(client)
    held = await claimed_tasks(client, "w1", 2)
    ends = [success(task_id=held[0]), failure(task_id=held[1], error_code="fatal")]
    first = await complete_many(client, "w1", ends)
    again = await complete_many(client, "w1", ends)
    assert [end["replayed"] for end in again["completed"]] == [True, True]
    for before, after in zip(first["completed"], again["completed"], strict=True):
        assert after == before | {"replayed": True}
    assert [len(await artifacts_of(client, task)) for task in held] == [1, 0]
    assert first["next"] == again["next"] == []


async def test_a_refused_end_leaves_the_others_recorded(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1", slots=2)
    await register_worker(client, "w2")
    for _ in range(4):
        await create_task(client)
    mine = await claimed_tasks(client, "w1", 2)
    [theirs] = await claimed_tasks(client, "w2", 1)
    ends = [
        success(task_id=mine[0]),
        success(task_id=mine[1], lease_id="not-the-lease"),
        success(task_id=theirs),
    ]
    body = await complete_many(client, "w1", ends, wait_seconds=0)
    first, stale, foreign = body["completed"]
    assert (first["task_status"], first["error"]) == ("completed", None)
    assert (stale["status_code"], stale["error"]) == (404, "Task or lease not found")
    assert foreign["status_code"] == 403
    assert foreign["task_status"] is None
    assert (await client.get(f"{API}/llm-tasks/{mine[1]}")).json()["status"] == "leased"
    assert (await client.get(f"{API}/llm-tasks/{theirs}")).json()["status"] == "leased"
    # the claim starts afresh once the ends are recorded: the slot the first end freed
    assert len(body["next"]) == 1
    assert body["next"][0]["task"]["status"] == "leased"


async def test_a_lone_refused_end_is_answered_in_the_batch(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    await claim(client, "w1")
    body = await complete_many(client, "w1", [success(task_id=task["id"], lease_id="gone")])
    assert body["completed"] == [
        {
            "task_id": task["id"],
            "task_status": None,
            "result_id": None,
            "artifact_id": None,
            "replayed": False,
            "error": "Task or lease not found",
            "status_code": 404,
        }
    ]


async def test_a_batch_is_bounded(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    url = f"{API}/workers/w1/complete"
    empty = await client.post(url, json={"completes": []})
    huge = await client.post(url, json={"completes": [success(task_id="t")] * 101})
    greedy = await client.post(
        url, json={"completes": [success(task_id="t")], "claim_next": {"max_tasks": 33}}
    )
    unnamed = await client.post(url, json={"completes": [success()]})
    assert [r.status_code for r in (empty, huge, greedy, unnamed)] == [400] * 4


async def test_a_pushed_lease_comes_first_then_queued_tasks(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1", slots=3)
    held = await create_task(client, prompt="held")
    await claim(client, "w1")
    pushed = await create_task(client, prompt="pushed")
    granted = await client.post(f"{API}/llm-tasks/{pushed['id']}/lease", json={"worker_id": "w1"})
    assert granted.status_code == 201, granted.text
    queued = [(await create_task(client, prompt=f"q{n}"))["id"] for n in range(3)]
    body = await complete_many(
        client, "w1", [success(task_id=held["id"])], wait_seconds=0, max_tasks=3
    )
    assert [grant["task"]["id"] for grant in body["next"]] == [pushed["id"], *queued[:2]]
    assert (await client.get(f"{API}/llm-tasks/{queued[2]}")).json()["status"] == "queued"


async def test_workers_draining_in_batches_at_once_take_each_task_once(
    client: httpx.AsyncClient,
) -> None:
    workers, slots, tasks = 4, 4, 60
    for n in range(workers):
        await register_worker(client, f"w{n}", slots=slots)
    queued = {(await create_task(client, prompt=f"t{n}"))["id"] for n in range(tasks)}
    completed: list[str] = []

    async def drain(worker: str) -> None:
        first = await claim(client, worker)
        held = [first] if first is not None else []
        while held:
            ends = [success(task_id=g["task"]["id"], lease_id=g["lease"]["id"]) for g in held]
            body = await complete_many(client, worker, ends, wait_seconds=0, max_tasks=slots)
            assert [end["error"] for end in body["completed"]] == [None] * len(held)
            completed.extend(end["task_id"] for end in body["completed"])
            held = body["next"]
            assert len(held) <= slots
            assert {grant["lease"]["worker_id"] for grant in held} <= {worker}

    await asyncio.gather(*(drain(f"w{n}") for n in range(workers)))
    assert sorted(completed) == sorted(queued)  # every task, once


async def test_an_end_sent_twice_in_one_batch_is_recorded_once(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    task = await create_task(client)
    await claim(client, "w1")
    end = success(task_id=task["id"])
    body = await complete_many(client, "w1", [end, end])
    first, again = body["completed"]
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again == first | {"replayed": True}
    assert len(await artifacts_of(client, task["id"])) == 1
