"""The seed's task lifecycle over HTTP (REFERENCE_BEHAVIOUR §10 items 1 to 3), on both databases."""

import httpx

from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock


async def test_happy_path_create_lease_heartbeat_complete(client: httpx.AsyncClient) -> None:
    task = await create_task(client)
    assert task["status"] == "queued"
    assert task["attempts"] == 0
    assert task["policy"] == {"timeout_sec": 120, "budget": 0}
    assert task["desired_format"] == "text"
    assert task["max_attempts"] == 3
    await register_worker(client, "w1")

    leased = await client.post(f"{API}/llm-tasks/{task['id']}/lease")
    assert leased.status_code == 201
    lease = leased.json()["lease"]
    assert leased.json()["worker"]["id"] == "w1"
    got = (await client.get(f"{API}/llm-tasks/{task['id']}")).json()
    assert (got["status"], got["attempts"], got["lease_id"]) == ("leased", 1, lease["id"])

    beat = await client.post(f"{API}/llm-tasks/{task['id']}/heartbeat")
    assert beat.status_code == 200
    assert beat.json()["expires_at"] >= lease["expires_at"]
    assert (await client.get(f"{API}/llm-tasks/{task['id']}")).json()["status"] == "running"

    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete",
        json={
            "status": "success",
            "output": "hi",
            "metrics": {"duration_ms": 12, "tokens_used": None},
        },
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["task"]["status"] == "completed"
    assert body["artifact"]["finalized"] is True
    assert body["artifact"]["type"] == "LLM_RESULT"
    assert body["artifact"]["content"] == "hi"
    assert body["result"]["status"] == "success"
    leases = (await client.get(f"{API}/leases")).json()
    assert leases[0]["status"] == "released"
    actions = [
        e["action"]
        for e in (await client.get(f"{API}/audit", params={"task_id": task["id"]})).json()
    ]
    assert actions[::-1] == ["task_created", "task_leased", "task_running", "task_completed"]


async def test_state_conflicts_and_not_found(client: httpx.AsyncClient) -> None:
    task = await create_task(client)
    assert (await client.post(f"{API}/llm-tasks/{task['id']}/lease")).json() == {
        "error": "No available worker with free capacity"
    }
    await register_worker(client, "w1")
    assert (await client.post(f"{API}/llm-tasks/{task['id']}/lease")).status_code == 201
    again = await client.post(f"{API}/llm-tasks/{task['id']}/lease")
    assert again.status_code == 409
    assert again.json() == {"error": "Task status is 'leased', expected 'queued'"}
    requeue = await client.post(f"{API}/llm-tasks/{task['id']}/requeue")
    assert requeue.status_code == 409
    assert requeue.json() == {"error": "Cannot requeue task with status 'leased'"}
    queued = await create_task(client)
    complete = await client.post(f"{API}/llm-tasks/{queued['id']}/complete", json=success())
    assert complete.status_code == 409
    assert complete.json() == {"error": "Task status is 'queued', expected 'leased' or 'running'"}
    for path in ("llm-tasks/nope", "workers/nope", "artifacts/nope"):
        response = await client.get(f"{API}/{path}")
        assert response.status_code == 404
        assert "error" in response.json()
    assert (await client.post(f"{API}/llm-tasks/nope/heartbeat")).json() == {
        "error": "Task or lease not found"
    }


async def test_validation_errors_use_the_flattened_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(f"{API}/llm-tasks", json={"context_id": "", "prompt": 5})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["formErrors"] == []
    assert set(error["fieldErrors"]) == {"context_id", "agent_slug", "prompt"}
    response = await client.post(
        f"{API}/llm-tasks", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["formErrors"]


async def test_expiry_requeues_then_dead_then_requeue_resets(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    task = await create_task(client, max_attempts=2)
    await register_worker(client, "w1")
    reaper = client.app.state.container.reaper  # type: ignore[attr-defined]
    for attempt in (1, 2):
        claimed = await claim(client, "w1")
        assert claimed is not None
        assert claimed["task"]["attempts"] == attempt
        clock.advance(301)
        assert await reaper.reap_once() == 1
    final = (await client.get(f"{API}/llm-tasks/{task['id']}")).json()
    assert final["status"] == "dead"
    requeued = (await client.post(f"{API}/llm-tasks/{task['id']}/requeue")).json()
    assert (requeued["status"], requeued["attempts"], requeued["lease_id"]) == ("queued", 0, None)


async def test_error_result_retries_with_backoff_then_dies(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    task = await create_task(client, max_attempts=2)
    await register_worker(client, "w1")
    first = await claim(client, "w1")
    assert first is not None
    response = await client.post(f"{API}/llm-tasks/{task['id']}/complete", json=failure("flaky"))
    assert response.json()["task"]["status"] == "queued"
    assert response.json()["task"]["not_before"] == clock.now + 15_000
    assert await claim(client, "w1") is None  # backing off
    clock.advance(15)
    second = await claim(client, "w1")
    assert second is not None
    response = await client.post(f"{API}/llm-tasks/{task['id']}/complete", json=failure("again"))
    assert response.json()["task"]["status"] == "dead"
    assert response.json()["task"]["last_error"] == "again"
