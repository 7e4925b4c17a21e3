"""End to end with real processes: Membridge, the runtime, workers running the real Claude CLI,
and the echo model standing in for the Anthropic API.

The CLI is the pinned npm release (`.ci/run` installs it into `.cache/claude-cli`); without it
these tests are skipped on a laptop and fail in CI.
"""

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.db import DatabaseProbe
from tests.support.membridge import MembridgeProcess
from tests.support.server import RuntimeProcess
from tests.support.worker import EchoModelProcess, WorkerProcess, claude_binary

TERMINAL = {"completed", "failed", "dead", "cancelled"}


@pytest.fixture(scope="session")
def claude() -> Path:
    path = claude_binary()
    if path is None:
        message = "the Claude CLI is not installed: `bloom claude install` (CI installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


class Stack:
    """Membridge, runtime, echo model and workers, with the runtime's HTTP API at hand."""

    def __init__(self, database_url: str, data_dir: Path, claude: Path):
        self.data_dir = data_dir
        self.claude = claude
        self.model = EchoModelProcess(data_dir)
        self.membridge = MembridgeProcess(data_dir)
        self.runtime = RuntimeProcess(
            database_url,
            data_dir,
            BLOOM_MEMBRIDGE_URL=self.membridge.url,
            MEMBRIDGE_ADMIN_KEY=self.membridge.admin_key or "",
            BLOOM_REAPER_INTERVAL_SEC="0.5",
            BLOOM_RETRY_BASE_SEC="0.5",
            BLOOM_WORKER_SYNC_SEC="1",
        )
        self.workers: dict[str, WorkerProcess] = {}
        self.http = httpx.Client(base_url=self.runtime.url + "/api/runtime", timeout=30)

    def start(self) -> None:
        self.model.start()
        self.membridge.start()
        self.runtime.start()

    def add_worker(self, name: str, **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            name,
            self.data_dir,
            self.runtime.url,
            self.model.url,
            self.claude,
            BLOOM_MEMBRIDGE_URL=self.membridge.url,
            MEMBRIDGE_ADMIN_KEY=self.membridge.admin_key or "",
            BLOOM_WORKER_LEASE_TTL_SEC="5",
            **env,
        )
        worker.start()
        self.workers[name] = worker
        return worker

    def close(self) -> None:
        self.http.close()
        for worker in self.workers.values():
            worker.kill()
        for server in (self.runtime, self.membridge, self.model):
            server.stop()

    def submit(self, prompt: str, **fields: Any) -> str:
        body = {"context_id": f"ctx-{time.monotonic_ns()}", "agent_slug": "default"} | fields
        response = self.http.post("/llm-tasks", json={"prompt": prompt} | body)
        assert response.status_code == 201, response.text
        task_id: str = response.json()["id"]
        return task_id

    def task(self, task_id: str) -> dict[str, Any]:
        task: dict[str, Any] = self.http.get(f"/llm-tasks/{task_id}").json()
        return task

    def wait(
        self, task_id: str, statuses: set[str] = TERMINAL, timeout: float = 60
    ) -> dict[str, Any]:
        task: dict[str, Any] = wait_for(
            lambda: self._in(task_id, statuses), timeout, f"{task_id} in {statuses}"
        )
        return task

    def _in(self, task_id: str, statuses: set[str]) -> dict[str, Any] | None:
        task = self.task(task_id)
        return task if task["status"] in statuses else None

    def output(self, task_id: str) -> str:
        artifacts = self.http.get("/artifacts", params={"task_id": task_id}).json()
        assert len(artifacts) == 1, artifacts
        return self.http.get(f"/artifacts/{artifacts[0]['id']}/content").text

    def logs(self) -> str:
        parts = [self.runtime.log(), self.membridge.log(), self.model.log()]
        return "\n".join(parts + [w.log() for w in self.workers.values()])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def stack(database_url: str, tmp_path: Path, claude: Path) -> Iterator[Stack]:
    built = Stack(database_url, tmp_path, claude)
    try:
        built.start()
        yield built
    finally:
        built.close()


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


def test_kill_9_of_a_worker_hands_its_task_to_the_other(stack: Stack, probe: DatabaseProbe) -> None:
    first = stack.add_worker("w1")
    task_id = stack.submit("slow one [[sleep 6]]")
    running = stack.wait(task_id, {"running"}, timeout=30)
    assert running["worker_id"] == "w1"
    dead_lease = running["lease_id"]
    wait_for(lambda: list(first.work_dir.glob(f"tasks/{task_id}")), 10, "the CLI to start")
    first.kill(signal.SIGKILL)
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


def _processes_in(directory: Path) -> list[int]:
    """Pids of live processes whose working directory is inside `directory`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(directory):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


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
    assert _processes_in(worker.work_dir / "tasks") == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_over_budget_fails_for_good(stack: Stack) -> None:
    stack.add_worker("w1")
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
