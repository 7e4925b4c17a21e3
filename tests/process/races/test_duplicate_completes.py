"""Concurrent completes on a real server, both databases: a burst of duplicates records one result,
conflicting ones keep one outcome."""

from collections.abc import Callable
from typing import Any

import httpx

from tests.process.races.concurrency import all_at_once, connect, open_connections, post
from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess

ROUNDS = 8  # leases completed concurrently, each by a burst of duplicates

DUPLICATES = 10


async def running_tasks(http: httpx.AsyncClient, n: int) -> list[tuple[str, str]]:
    """`n` tasks claimed and heartbeated by one worker: [(task id, lease id)]."""
    await register_worker(http, "w1", slots=n)
    for i in range(n):
        await create_task(http, context_id=f"ctx-{i}")
    running = []
    for _ in range(n):
        claimed = await claim(http, "w1")
        assert claimed is not None
        task_id, lease_id = claimed["task"]["id"], claimed["lease"]["id"]
        beat = await http.post(f"{API}/llm-tasks/{task_id}/heartbeat", json={"lease_id": lease_id})
        assert beat.status_code == 200
        running.append((task_id, lease_id))
    return running


async def complete_in_bursts(
    server: RuntimeProcess, bodies: Callable[[str], list[dict[str, Any]]]
) -> list[tuple[str, str, list[dict[str, Any]], list[httpx.Response]]]:
    """For each of ROUNDS running leases, send all of `bodies(lease_id)` at once; every burst
    at the same moment. Returns [(task id, lease id, bodies, responses)]."""
    async with connect(server, ROUNDS * DUPLICATES) as http:
        running = await running_tasks(http, ROUNDS)
        await open_connections(http, ROUNDS * DUPLICATES)
        plan = [(task_id, lease_id, bodies(lease_id)) for task_id, lease_id in running]
        calls = [
            post(http, f"llm-tasks/{task_id}/complete", body)
            for task_id, _, burst in plan
            for body in burst
        ]
        responses = await all_at_once(calls)
    return [
        (task_id, lease_id, burst, responses[i * DUPLICATES : (i + 1) * DUPLICATES])
        for i, (task_id, lease_id, burst) in enumerate(plan)
    ]


async def test_ten_concurrent_duplicate_completes_record_one_result(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """10 simultaneous identical completes of one lease (for 8 leases at once): all answer 200
    with the same result and artifact, exactly one is the original (the rest say
    Idempotent-Replayed), and the database holds one result, one artifact and one
    task_completed entry per lease."""
    bursts = await complete_in_bursts(
        runtime_process, lambda lease_id: [success("only once", lease_id=lease_id)] * DUPLICATES
    )
    results = {r["lease_id"]: r for r in probe.results()}
    assert len(probe.results()) == len(results) == ROUNDS
    artifacts = {a["id"]: a for a in probe.artifacts()}
    assert len(artifacts) == ROUNDS
    for task_id, lease_id, _, responses in bursts:
        assert [r.status_code for r in responses] == [200] * DUPLICATES, [r.text for r in responses]
        result = results[lease_id]
        assert {r.json()["result"]["id"] for r in responses} == {result["id"]}
        assert {r.json()["artifact"]["id"] for r in responses} == {result["artifact_id"]}
        assert artifacts[result["artifact_id"]]["task_id"] == task_id
        replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
        assert sorted(replayed, key=str) == [None] + ["true"] * (DUPLICATES - 1)
        assert probe.audit_actions(task_id)["task_completed"] == 1
        assert probe.task(task_id)["status"] == "completed"
        assert [lease["status"] for lease in probe.leases_of(task_id)] == ["released"]
    assert probe.kept_counts() == probe.full_counts()  # each task counted once, as completed


async def test_conflicting_concurrent_completes_keep_one_outcome(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """5 success and 5 error completes of one lease at once (for 8 leases at once): one outcome
    wins; the completes that agree with it answer 200 with that same result, one of them as the
    original, and the others 409; one result recorded per lease."""
    bursts = await complete_in_bursts(
        runtime_process,
        lambda lease_id: (
            [success(lease_id=lease_id), failure(lease_id=lease_id)] * (DUPLICATES // 2)
        ),
    )
    results = {r["lease_id"]: r for r in probe.results()}
    assert len(probe.results()) == len(results) == ROUNDS
    for task_id, lease_id, bodies, responses in bursts:
        result = results[lease_id]
        for body, response in zip(bodies, responses, strict=True):
            if body["status"] == result["status"]:
                assert response.status_code == 200, response.text
                assert response.json()["result"]["id"] == result["id"]
            else:
                assert response.status_code == 409, response.text
        originals = [
            r for r in responses if r.is_success and "Idempotent-Replayed" not in r.headers
        ]
        assert len(originals) == 1
        actions = probe.audit_actions(task_id)
        ends = ("task_completed", "task_retry_scheduled", "task_failed", "task_dead")
        assert sum(actions[end] for end in ends) == 1  # the attempt's one end, named for it
        assert actions["task_completed"] == (result["status"] == "success")
        expected_artifacts = 1 if result["status"] == "success" else 0
        assert len([a for a in probe.artifacts() if a["task_id"] == task_id]) == expected_artifacts
    assert probe.kept_counts() == probe.full_counts()  # each task counted once, in its outcome
