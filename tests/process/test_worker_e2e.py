"""End to end with real processes: Membridge, the runtime, workers running the real Claude CLI,
and the echo model standing in for the Anthropic API.

The CLI is the pinned npm release (`.ci/run` installs it into `.cache/claude-cli`); without it
these tests are skipped on a laptop and fail in CI.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cancel import processes_in
from tests.support.db import DatabaseProbe
from tests.support.stack import Stack, wait_for


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # a fleet's database
def test_two_workers_complete_twenty_tasks(stack: Stack, probe: DatabaseProbe) -> None:
    for name in ("w1", "w2"):
        stack.add_worker(name, BLOOM_WORKER_CONCURRENCY="2")
    ids = [stack.submit(f"task number {i}") for i in range(20)]
    for i, task_id in enumerate(ids):
        task = stack.wait(task_id, timeout=120)
        assert task["status"] == "completed", (task, stack.logs()[-3000:])
        assert stack.output(task_id) == f"echo: task number {i}"
        actions = [entry["action"] for entry in probe.audit(task_id)]
        assert (actions[0], actions[-1]) == ("task_created", "task_completed"), actions
        assert actions.index("task_leased") < actions.index("task_running"), actions
    results = probe.results()
    assert len(results) == 20
    assert all(r["status"] == "success" for r in results)
    assert {r["worker_id"] for r in results} == {"w1", "w2"}
    for r in results:
        assert r["metrics"]["duration_ms"] > 0
        assert r["metrics"]["tokens_used"] > 0
        assert r["metrics"]["cost_usd"] > 0
        assert r["metrics"]["num_turns"] == 1
        # usage as typed columns, the model too (the CLI names the echo model's in modelUsage)
        assert r["cost_usd"] == r["metrics"]["cost_usd"]
        assert r["tokens_used"] == r["metrics"]["tokens_used"]
        assert r["model"] == r["metrics"]["model"]
        assert r["model"]
    # both workers are agents at Membridge too
    with stack.membridge.client() as membridge:
        agents = {a["name"]: a for a in membridge.get("/agents").json()}
    assert {"w1", "w2"} <= set(agents)
    assert agents["w1"]["capabilities"]["max_concurrency"] == 2
    # live output was kept, in order, for every task
    events = stack.http.get(f"/llm-tasks/{ids[0]}/events", params={"follow": "false"})
    kinds = [
        line[len("event: ") :] for line in events.text.splitlines() if line.startswith("event: ")
    ]
    assert kinds[0] == "started"
    assert "claude" in kinds
    assert kinds[-2:] == ["finished", "end"]


def working_in(directory: Path) -> set[int]:
    """The processes whose working directory is `directory` (from /proc: Linux)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(entry / "cwd")) == directory.resolve():
                    found.add(int(entry.name))
    return found


def test_kill_9_of_a_worker_hands_its_task_to_the_other(stack: Stack, probe: DatabaseProbe) -> None:
    """The task runs again on the other worker, once; the killed worker's CLI dies with it (its
    parent-death signal), and its late complete is refused."""
    first = stack.add_worker("w1")
    task_id = stack.submit("slow one [[sleep 6]]")
    running = stack.wait(task_id, {"running"}, timeout=30)
    assert running["worker_id"] == "w1"
    dead_lease = running["lease_id"]
    cli = wait_for(lambda: working_in(first.work_dir / "tasks" / task_id), 10, "the CLI to start")
    first.kill(signal.SIGKILL)
    wait_for(lambda: not cli & working_in(first.work_dir / "tasks" / task_id), 5, "the CLI to die")
    stack.add_worker("w2")

    done = stack.wait(task_id, timeout=60)
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert done["worker_id"] == "w2"
    leases = probe.leases_of(task_id)
    assert [lease["status"] for lease in leases] == ["expired", "released"]
    assert len([r for r in probe.results() if r["task_id"] == task_id]) == 1

    before = probe.snapshot(task_id)
    late = stack.http.post(
        f"/llm-tasks/{task_id}/complete",
        json={
            "status": "success",
            "output": "late",
            "metrics": {"duration_ms": 1},
            "lease_id": dead_lease,
            "worker_id": "w1",
        },
    )
    assert late.status_code == 409, late.text
    assert probe.snapshot(task_id) == before
    assert stack.output(task_id) == "echo: slow one [[sleep 6]]"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_context_stays_on_its_worker_and_resumes_its_session(stack: Stack) -> None:
    w1 = stack.add_worker("w1")
    first = stack.submit("remember the word lighthouse", context_id="ctx-A")
    assert stack.wait(first)["status"] == "completed"
    stack.add_worker("w2")
    second = stack.submit("what was the word?", context_id="ctx-A")
    done = stack.wait(second)
    assert done["status"] == "completed"
    assert done["worker_id"] == "w1"
    assert done["session_id"] == stack.task(first)["session_id"]
    # the model saw the earlier turn in the resumed conversation
    last = stack.model.requests()[-1]
    texts = [str(m["content"]) for m in last["messages"]]
    assert any("echo: remember the word lighthouse" in t for t in texts), texts

    # w1 full (its one slot busy with a long task of the context): the next one spills to w2
    busy = stack.submit("occupy [[sleep 8]]", context_id="ctx-A")
    assert stack.wait(busy, {"running"})["worker_id"] == "w1"
    spilled = stack.submit("and now?", context_id="ctx-A")
    assert stack.wait(spilled, timeout=20)["worker_id"] == "w2"

    # w1 gone: its context moves on without waiting for it
    stack.wait(busy)
    w1.stop()
    assert stack.task(busy)["status"] == "completed"
    moved = stack.submit("still there?", context_id="ctx-A")
    assert stack.wait(moved, timeout=20)["worker_id"] == "w2"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_timeout_kills_the_cli_and_retries(stack: Stack, probe: DatabaseProbe) -> None:
    worker = stack.add_worker("w1")
    task_id = stack.submit("hang [[sleep 60]]", policy={"timeout_sec": 2}, max_attempts=2)
    task = stack.wait(task_id, timeout=60)
    assert task["status"] == "dead"
    assert task["attempts"] == 2
    errors = [r for r in probe.results() if r["task_id"] == task_id]
    assert [(r["error_code"], r["error_message"]) for r in errors] == [
        ("timeout", "Timed out after 2s")
    ] * 2
    assert processes_in(worker.work_dir / "tasks") == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_over_budget_fails_for_good_and_overloaded_waits_for_free(
    stack: Stack, probe: DatabaseProbe
) -> None:
    stack.add_worker("w1")
    busy = stack.submit("try later [[overloaded]]")
    wait_for(lambda: probe.results(), 30, "the overloaded attempt's result")
    task = stack.task(busy)
    assert task["status"] == "queued"
    assert task["attempts"] == 0
    assert task["not_before"] > int(time.time() * 1000) + 30_000
    assert probe.results()[0]["error_code"] == "rate_limited"

    task_id = stack.submit("expensive [[tokens 200000]]", policy={"budget": 0.01})
    task = stack.wait(task_id)
    assert task["status"] == "failed"
    assert task["attempts"] == 1
    assert task["last_error"].startswith("Budget exceeded: spent $")
    assert task["last_error"].endswith(" of $0.01")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_usage_limit_parks_the_task_and_the_worker_until_the_reset(
    stack: Stack, probe: DatabaseProbe
) -> None:
    stack.add_worker("w1")
    reset = int(time.time()) + 8
    limited = stack.submit(f"limited [[usage-limit {reset}]]")
    wait_for(lambda: probe.results(), 30, "the first attempt's result")
    parked = stack.task(limited)
    assert parked["not_before"] == reset * 1000
    assert parked["attempts"] == 0
    assert "usage limit reached" in parked["last_error"]

    other = stack.submit("an ordinary task")
    time.sleep(2)
    assert stack.task(other)["status"] == "queued"  # the worker takes nothing until the reset
    for task_id in (limited, other):
        assert stack.wait(task_id, timeout=40)["status"] == "completed"
        # the attempt that succeeded started after the reset
        last_start = max(lease["started_at"] for lease in probe.leases_of(task_id))
        assert last_start >= reset * 1000


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sigterm_drains_the_running_task_then_exits(stack: Stack) -> None:
    worker = stack.add_worker("w1")
    task_id = stack.submit("finish me [[sleep 3]]")
    stack.wait(task_id, {"running"})
    worker.stop()
    assert worker.process is not None
    assert worker.process.returncode == 0
    assert stack.task(task_id)["status"] == "completed"
    assert stack.http.get("/workers/w1").json()["status"] == "offline"
    untouched = stack.submit("nobody takes this")
    time.sleep(1)
    assert stack.task(untouched)["status"] == "queued"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_workers_use_keys_of_their_own_on_a_protected_runtime(
    database_url: str, tmp_path: Path, claude: Path, probe: DatabaseProbe
) -> None:
    stack = Stack(database_url, tmp_path, claude, admin_key="admin-key-for-the-e2e-run")
    try:
        stack.start()
        for name in ("w1", "w2"):
            stack.add_worker(name)
        ids = [stack.submit(f"protected {i}") for i in range(4)]
        for task_id in ids:
            assert stack.wait(task_id)["status"] == "completed", stack.logs()[-3000:]
        assert {r["worker_id"] for r in probe.results()} <= {"w1", "w2"}
        worker_key = stack.workers["w1"].env["BLOOM_WORKER_API_KEY"]
        as_worker = httpx.get(
            f"{stack.runtime.url}/api/runtime/llm-tasks", headers={"X-Runtime-API-Key": worker_key}
        )
        assert as_worker.status_code == 403
        anonymous = httpx.get(f"{stack.runtime.url}/api/runtime/llm-tasks")
        assert anonymous.status_code == 401
    finally:
        stack.close()
