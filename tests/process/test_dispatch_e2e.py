"""Push dispatch end to end: the runtime hands a task to a worker's agent surface (`bloom worker
run --agent-port`), which runs the real Claude CLI against the echo model, streams its output
and completes through the same fenced callbacks as a claim; killed mid-task, its lease lapses
and another worker finishes the task; told to restart, it finishes its task and runs again."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.db import DatabaseProbe
from tests.support.net import free_port
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def agent_worker(stack: Stack, name: str) -> str:
    """A worker that serves the agent surface and claims nothing: it runs only what is
    dispatched to it, as the reference's agent; its registered URL."""
    port = free_port()
    stack.add_worker(name, BLOOM_WORKER_AGENT_PORT=str(port), BLOOM_WORKER_CLAIM="false")
    url = f"http://127.0.0.1:{port}"
    health = httpx.get(f"{url}/health", timeout=5).json()  # public, key or not
    assert (health["node_id"], health["capabilities"]["execute_task"]) == (name, True)
    assert stack.http.get(f"/workers/{name}").json()["url"] == url
    return url


def test_a_dispatched_task_runs_on_the_agent_with_live_output(
    stack: Stack, probe: DatabaseProbe
) -> None:
    url = agent_worker(stack, "node-a")
    task_id = stack.submit("pushed, not pulled")
    sent = stack.http.post(f"/llm-tasks/{task_id}/dispatch", json={"worker_id": "node-a"})
    assert sent.status_code == 200, sent.text
    assert sent.json()["execution"]["accepted"] is True
    task = stack.wait(task_id, timeout=90)
    assert task["status"] == "completed", stack.logs()[-3000:]
    assert task["attempts"] == 1
    assert stack.output(task_id) == "echo: pushed, not pulled"
    events = httpx.get(
        f"{stack.runtime.url}/api/runtime/llm-tasks/{task_id}/events?follow=false", timeout=10
    ).text
    assert "event: started" in events
    assert "echo: pushed, not pulled" in events
    actions = [entry["action"] for entry in probe.audit(task_id)]
    assert actions[:3] == ["task_created", "task_leased", "task_dispatched"]
    assert actions[-1] == "task_completed"
    assert len(probe.leases_of(task_id)) == 1  # run once: no claim handed it out again
    # the worker's own metrics, as Prometheus reads them
    scraped = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
        for sample in family.samples
    }
    claude = ("cli", "claude")
    assert scraped[("bloom_worker_attempts_total", (claude, ("outcome", "success")))] == 1
    assert scraped[("bloom_worker_attempt_run_seconds_count", (claude,))] == 1
    assert scraped[("bloom_worker_cost_usd_total", (claude,))] > 0
    assert scraped[("bloom_worker_running_tasks", ())] == 0
    assert scraped[("bloom_worker_slots", ())] == 1


def test_an_agent_killed_mid_task_leaves_the_task_to_another_worker(
    stack: Stack, probe: DatabaseProbe
) -> None:
    agent_worker(stack, "node-a")
    task_id = stack.submit("slow [[sleep 30]]", max_attempts=2)
    sent = stack.http.post(
        f"/llm-tasks/{task_id}/dispatch", json={"worker_id": "node-a", "ttl_seconds": 5}
    )
    assert sent.status_code == 200, sent.text
    wait_for(lambda: stack.task(task_id)["status"] == "running" or None, 60, "the agent's run")
    stack.workers["node-a"].kill()  # kill -9: no goodbye, no complete
    stack.add_worker("node-b")
    task = stack.wait(task_id, timeout=120)
    assert task["status"] == "completed", stack.logs()[-3000:]
    assert task["worker_id"] == "node-b"
    statuses = [lease["status"] for lease in probe.leases_of(task_id)]
    assert statuses == ["expired", "released"]


def test_restart_lets_the_running_task_finish_then_starts_the_worker_again_in_place(
    stack: Stack, probe: DatabaseProbe
) -> None:
    key = {"X-MEMBRIDGE-AGENT": "process-control-key"}
    port = free_port()
    stack.add_worker(
        "node-a",
        BLOOM_WORKER_AGENT_PORT=str(port),
        BLOOM_AGENT_KEY=key["X-MEMBRIDGE-AGENT"],
        BLOOM_WORKER_ALLOW_PROCESS_CONTROL="true",
    )
    url = f"http://127.0.0.1:{port}"
    before = httpx.get(f"{url}/health", timeout=5).json()
    task_id = stack.submit("finish me first [[sleep 3]]")
    wait_for(lambda: stack.task(task_id)["status"] == "running" or None, 60, "the agent's run")
    restarting = httpx.post(f"{url}/restart", headers=key, timeout=10).json()
    assert (restarting["ok"], restarting["running"]) == (True, [task_id])

    def started_again() -> dict[str, object] | None:
        try:
            health = httpx.get(f"{url}/health", timeout=2).json()
        except httpx.HTTPError:
            return None
        return health if health["started_at"] != before["started_at"] else None

    after = wait_for(started_again, 90, "the worker started again")
    assert after["pid"] == before["pid"]  # the same process, its program run again (exec)
    task = stack.task(task_id)
    assert task["status"] == "completed", stack.logs()[-3000:]
    assert stack.output(task_id).startswith("echo: finish me first")
    assert len(probe.leases_of(task_id)) == 1
    wait_for(lambda: stack.http.get("/workers/node-a").json()["status"] == "online" or None, 30,
             "node-a online again")  # fmt: skip
