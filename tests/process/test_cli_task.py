"""`bloom task …` and `bloom worker list` against a real runtime server: a person's view of the
queue. Tasks are made to progress by driving the worker protocol (claim, heartbeat, events,
complete) from the test itself."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from typer.testing import CliRunner

from bloom.cli.main import app
from tests.support.databases import fresh_sqlite_url
from tests.support.net import closed_port
from tests.support.server import RuntimeProcess

API = "/api/runtime"
NO_KEY: dict[str, str | None] = {"BLOOM_API_KEY": None, "RUNTIME_API_KEY": None, "COLUMNS": "200"}


@pytest.fixture(scope="module")
def runtime(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RuntimeProcess]:
    directory = tmp_path_factory.mktemp("cli-runtime")
    process = RuntimeProcess(fresh_sqlite_url(sqlite_template, directory), directory)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def http(runtime: RuntimeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=runtime.url, timeout=30) as client:
        yield client


def bloom(*args: str, **env: str | None) -> Any:
    """`bloom <args>` in-process; stdout and stderr apart."""
    return CliRunner().invoke(app, list(args), env=NO_KEY | env)


def create(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"context_id": f"ctx-{time.monotonic_ns()}", "agent_slug": "default", "prompt": "hi"}
    response = http.post(f"{API}/llm-tasks", json=body | fields)
    assert response.status_code == 201, response.text
    return dict(response.json())


def register(http: httpx.Client, name: str, **capabilities: Any) -> None:
    caps = {"claude_cli": True, "max_concurrency": 1} | capabilities
    response = http.post(f"{API}/workers", json={"name": name, "capabilities": caps})
    assert response.status_code in (200, 201), response.text


def claim(http: httpx.Client, worker: str, task_id: str, wait: float = 20) -> dict[str, Any]:
    """Claim until this test's task comes (other tests' tasks are completed on the way)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        response = http.post(f"{API}/workers/{worker}/claim", json={"wait_seconds": 2})
        if response.status_code == 204:
            continue
        grant = dict(response.json())
        if grant["task"]["id"] == task_id:
            return grant
        finish(http, grant, output="not this one")
    raise AssertionError(f"{task_id} was never claimed")


def send(http: httpx.Client, grant: dict[str, Any], *events: tuple[str, Any]) -> None:
    lease = grant["lease"]
    body = {
        "lease_id": lease["id"],
        "worker_id": lease["worker_id"],
        "events": [{"type": kind, "data": data} for kind, data in events],
    }
    response = http.post(f"{API}/llm-tasks/{lease['task_id']}/events", json=body)
    assert response.status_code == 200, response.text


def heartbeat(http: httpx.Client, grant: dict[str, Any]) -> None:
    lease = grant["lease"]
    body = {"lease_id": lease["id"], "worker_id": lease["worker_id"]}
    response = http.post(f"{API}/llm-tasks/{lease['task_id']}/heartbeat", json=body)
    assert response.status_code == 200, response.text


def finish(http: httpx.Client, grant: dict[str, Any], **fields: Any) -> dict[str, Any]:
    lease = grant["lease"]
    body = {
        "status": "success",
        "output": "done",
        "metrics": {"duration_ms": 1200, "cost_usd": 0.0123, "tokens_used": 42},
        "lease_id": lease["id"],
        "worker_id": lease["worker_id"],
    } | fields
    response = http.post(f"{API}/llm-tasks/{lease['task_id']}/complete", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def completed_task(http: httpx.Client, worker: str, output: str, **fields: Any) -> str:
    register(http, worker)
    task = create(http, **fields)
    grant = claim(http, worker, task["id"])
    heartbeat(http, grant)
    finish(http, grant, output=output)
    return str(task["id"])


def submit_process(runtime: RuntimeProcess, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BLOOM_API_KEY", "RUNTIME_API_KEY")}
    return subprocess.Popen(
        [sys.executable, "-m", "bloom.cli.main", "task", "submit", *args, "--url", runtime.url],
        env=env | {"COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def collect(stream: IO[str] | None) -> list[str]:
    """The stream's lines as they come (a thread reads them)."""
    lines: list[str] = []
    assert stream is not None
    threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in stream), daemon=True
    ).start()
    return lines


def wait_for_line(lines: list[str], needle: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not any(needle in line for line in lines):
        assert time.monotonic() < deadline, f"no {needle!r} in:\n" + "\n".join(lines)
        time.sleep(0.05)


def task_of(http: httpx.Client, prompt: str, wait: float = 30) -> dict[str, Any]:
    """The task with this prompt, once it exists."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for task in http.get(f"{API}/llm-tasks", params={"limit": 50}).json():
            if task["prompt"] == prompt:
                return dict(task)
        time.sleep(0.1)
    raise AssertionError(f"no task {prompt!r}")


ASSISTANT = {
    "type": "assistant",
    "message": {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "thinking out loud"},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.txt"}},
        ],
    },
}
RETRY = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
         "retry_delay_ms": 500, "error_status": 529, "error": "overloaded"}  # fmt: skip


def test_submit_wait_shows_progress_and_live_output_then_prints_the_answer(runtime, http):
    register(http, "cli-w1")
    prompt = f"explain {time.monotonic_ns()}"
    proc = submit_process(runtime, prompt, "--wait", "--budget", "0.5", "--timeout", "60")
    try:
        lines = collect(proc.stderr)
        task = task_of(http, prompt)
        assert task["policy"] == {"timeout_sec": 60, "budget": 0.5}
        assert task["context_id"].startswith("ctx-")
        wait_for_line(lines, "queued")
        grant = claim(http, "cli-w1", task["id"])
        heartbeat(http, grant)
        wait_for_line(lines, "running on cli-w1")
        started = {"worker_id": "cli-w1", "lease_id": grant["lease"]["id"], "attempt": 1,
                   "resumed_session": False}  # fmt: skip
        send(http, grant, ("started", started), ("claude", RETRY), ("claude", ASSISTANT))
        send(http, grant, ("claude", {"type": "user", "message": {"content": []}}))
        send(http, grant, ("stderr", {"line": "a warning from the CLI"}))
        finished = {"status": "success", "error_code": None, "error": None, "duration_ms": 1200,
                    "cost_usd": 0.0123, "tokens_used": 42}  # fmt: skip
        send(http, grant, ("finished", finished))
        finish(http, grant, output="the answer\nin two lines")
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        proc.wait(60)
    finally:
        proc.kill()
    stderr = "\n".join(lines)
    assert proc.returncode == 0, stderr
    assert stdout == "the answer\nin two lines\n"
    assert f"task {task['id']}" in stderr
    assert stderr.count("running on cli-w1") == 1
    assert "started on cli-w1, attempt 1" in stderr
    assert "↻ API retry 1/10 in 0.5s (529 overloaded)" in stderr
    assert "thinking out loud" in stderr
    assert "→ tool Read" in stderr
    assert "a warning from the CLI" in stderr
    assert "run finished: success (1.2s, $0.0123, 42 tokens)" in stderr
    assert "completed" in stderr
    assert "Traceback" not in stderr


def test_submit_wait_on_a_failed_task_exits_1_with_its_error(runtime, http):
    register(http, "cli-w2")
    prompt = f"fail {time.monotonic_ns()}"
    proc = submit_process(runtime, prompt, "--wait")
    try:
        task = task_of(http, prompt)
        grant = claim(http, "cli-w2", task["id"])
        heartbeat(http, grant)
        finish(
            http,
            grant,
            status="error",
            output="",
            error_code="fatal",
            error_message="Claude CLI exited with status 1: bad flag",
        )
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert stdout == ""
    assert "failed" in stderr
    assert "Claude CLI exited with status 1: bad flag" in stderr
    assert "Traceback" not in stderr


def test_ctrl_c_while_waiting_stops_waiting_and_says_how_to_watch(runtime, http):
    prompt = f"nobody claims this {time.monotonic_ns()}"
    proc = submit_process(runtime, prompt, "--wait")
    try:
        task = task_of(http, prompt)
        time.sleep(1.0)  # let it follow the task
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert f"bloom task watch {task['id']}" in stderr
    assert "Traceback" not in stderr
    assert http.get(f"{API}/llm-tasks/{task['id']}").json()["status"] == "queued"
    bloom("task", "cancel", task["id"], "--url", runtime.url)


def test_submit_without_wait_prints_the_id_and_sends_every_option(runtime, http):
    args = [
        "task", "submit", "do it", "--context", "ctx-opts", "--agent", "reviewer",
        "--format", "json", "--timeout", "30", "--budget", "2", "--priority", "7",
        "--hint", "src/*.py", "--hint", "README.md", "--idempotency-key", "key-1",
        "--max-attempts", "5", "--url", runtime.url,
    ]  # fmt: skip
    result = bloom(*args)
    assert result.exit_code == 0, result.output
    task_id = result.stdout.strip()
    task = http.get(f"{API}/llm-tasks/{task_id}").json()
    assert task["context_id"] == "ctx-opts"
    assert task["agent_slug"] == "reviewer"
    assert task["desired_format"] == "json"
    assert task["policy"] == {"timeout_sec": 30, "budget": 2.0}
    assert task["priority"] == 7
    assert task["context_hints"] == ["src/*.py", "README.md"]
    assert task["idempotency_key"] == "key-1"
    assert task["max_attempts"] == 5
    again = bloom(*args, "--json")  # the same request again: the same task
    assert again.exit_code == 0, again.output
    assert f'"id": "{task_id}"' in again.stdout
    bloom("task", "cancel", task_id, "--url", runtime.url)


def test_submit_reads_the_prompt_from_stdin(runtime, http):
    result = CliRunner().invoke(
        app, ["task", "submit", "-", "--url", runtime.url], input="from stdin\n", env=NO_KEY
    )
    assert result.exit_code == 0, result.output
    task = http.get(f"{API}/llm-tasks/{result.stdout.strip()}").json()
    assert task["prompt"] == "from stdin\n"
    bloom("task", "cancel", task["id"], "--url", runtime.url)


def test_watch_a_finished_task_prints_its_answer(runtime, http):
    task_id = completed_task(http, "cli-w3", "watched answer")
    result = bloom("task", "watch", task_id, "--url", runtime.url)
    assert result.exit_code == 0, result.output
    assert result.stdout == "watched answer\n"
    assert "completed" in result.stderr


def test_list_and_show(runtime, http):
    task_id = completed_task(http, "cli-w4", "shown answer", prompt="please list me")
    listed = bloom("task", "list", "--status", "completed", "--url", runtime.url)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if task_id in line)
    assert "completed" in row
    assert "cli-w4" in row
    assert "1/3" in row
    assert "please list me" in row
    shown = bloom("task", "show", task_id, "--url", runtime.url)
    assert shown.exit_code == 0, shown.output
    assert task_id in shown.stdout
    assert "please list me" in shown.stdout
    assert "shown answer" in shown.stdout
    as_json = bloom("task", "show", task_id, "--json", "--url", runtime.url)
    assert '"output": "shown answer"' in as_json.stdout
    bad = bloom("task", "list", "--status", "nonsense", "--url", runtime.url)
    assert bad.exit_code == 2
    claude = bloom("task", "list", "--cli", "claude", "--json", "--url", runtime.url)
    assert task_id in {task["id"] for task in json.loads(claude.stdout)}
    codex = bloom("task", "list", "--cli", "codex", "--json", "--url", runtime.url)
    assert task_id not in {task["id"] for task in json.loads(codex.stdout)}
    assert bloom("task", "list", "--cli", "aider", "--url", runtime.url).exit_code == 2


def test_cancel_then_cancel_again_is_one_red_line(runtime, http):
    task = create(http)
    first = bloom("task", "cancel", task["id"], "--url", runtime.url)
    assert first.exit_code == 0, first.output
    assert f"task {task['id']} cancelled" in first.stdout
    second = bloom("task", "cancel", task["id"], "--url", runtime.url)
    assert second.exit_code == 1
    assert second.stderr.startswith("bloom: refused (409): ")
    assert len(second.stderr.strip().splitlines()) == 1


def test_requeue_a_failed_task(runtime, http):
    register(http, "cli-w5")
    task = create(http)
    grant = claim(http, "cli-w5", task["id"])
    finish(http, grant, status="error", output="", error_code="fatal", error_message="no")
    shown = bloom("task", "show", task["id"], "--url", runtime.url)
    assert "last error" in shown.stdout
    result = bloom("task", "requeue", task["id"], "--url", runtime.url)
    assert result.exit_code == 0, result.output
    assert "queued again" in result.stdout
    assert http.get(f"{API}/llm-tasks/{task['id']}").json()["status"] == "queued"
    bloom("task", "cancel", task["id"], "--url", runtime.url)


def test_unknown_task_is_not_found(runtime):
    result = bloom("task", "show", "no-such-task", "--url", runtime.url)
    assert result.exit_code == 1
    assert result.stderr.startswith("bloom: not found: ")
    assert result.stdout == ""


def test_unreachable_runtime_is_one_line_and_exit_2():
    url = f"http://127.0.0.1:{closed_port()}"
    for args in (["task", "list"], ["task", "submit", "x"], ["worker", "list"]):
        result = bloom(*args, "--url", url)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"bloom: cannot reach the runtime at {url}")
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_the_url_comes_from_the_environment(runtime):
    result = bloom("task", "list", BLOOM_RUNTIME_URL=runtime.url)
    assert result.exit_code == 0, result.output


def test_worker_list(runtime, http):
    register(http, "cli-listed", max_concurrency=3, labels=["gpu", "eu"])
    result = bloom("worker", "list", "--url", runtime.url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "cli-listed" in line)
    assert "online" in row
    assert "0/3" in row
    assert "gpu, eu" in row
    assert "ago" in row


def test_usage_per_project_as_a_table_and_as_json(runtime, http):
    for project, cost in (("cli-usage-a", 0.5), ("cli-usage-b", 0.25), ("cli-usage-a", 0.125)):
        register(http, "cli-usage")
        task = create(http, agent_slug=project)
        grant = claim(http, "cli-usage", task["id"])
        metrics = {"duration_ms": 2000, "cost_usd": cost, "input_tokens": 1000, "output_tokens": 5}
        finish(http, grant, metrics=metrics)
    result = bloom("usage", "--json", "--url", runtime.url)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["cli-usage-a"]["cost_usd"] == 0.625
    assert groups["cli-usage-a"]["attempts"] == 2
    assert groups["cli-usage-b"]["input_tokens"] == 1000
    table = bloom("usage", "--since", "1h", "--url", runtime.url)
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if "cli-usage-a" in line)
    assert row.split() == ["cli-usage-a", "$0.6250", "2", "0", "2", "2,000", "10", "0", "4.0", "s"]
    assert "total" in table.stdout
    by_day = bloom("usage", "--by", "day", "--since", "2d", "--json", "--url", runtime.url)
    assert json.loads(by_day.stdout)["group_by"] == "day"
    by_cli = bloom("usage", "--by", "cli", "--since", "1h", "--json", "--url", runtime.url)
    assert json.loads(by_cli.stdout)["group_by"] == "cli"
    assert "claude" in {group["key"] for group in json.loads(by_cli.stdout)["groups"]}
    bad = bloom("usage", "--since", "last tuesday", "--url", runtime.url)
    assert bad.exit_code == 2  # a usage error, told before the runtime is asked
    assert "--since takes" in bad.stderr


def test_budget_set_list_remove_and_a_held_task_says_why(runtime, http):
    register(http, "cli-budget")
    spent = create(http, agent_slug="cli-budgeted")
    waiting = create(http, agent_slug="cli-budgeted")
    result = bloom("budget", "set", "cli-budgeted", "--daily", "0.5", "--url", runtime.url)
    assert result.exit_code == 0, result.output
    assert "today $0.00 of $0.50, this month $0.00 (no limit); running" in result.stdout
    finish(
        http, claim(http, "cli-budget", spent["id"]), metrics={"duration_ms": 1, "cost_usd": 0.75}
    )
    listed = bloom("budget", "list", "--url", runtime.url)
    row = next(line for line in listed.stdout.splitlines() if "cli-budgeted" in line)
    assert "$0.75 of $0.50" in row
    assert "spent: tasks wait until" in row
    shown = bloom("task", "show", waiting["id"], "--url", runtime.url)
    assert "project cli-budgeted has spent its budget (budget_exhausted): until" in shown.stdout
    tasks = bloom("task", "list", "--url", runtime.url)
    assert "queued held" in next(
        line for line in tasks.stdout.splitlines() if waiting["id"] in line
    )
    as_json = json.loads(bloom("budget", "list", "--json", "--url", runtime.url).stdout)
    assert [b["held_until"] > 0 for b in as_json if b["project"] == "cli-budgeted"] == [True]
    removed = bloom("budget", "remove", "cli-budgeted", "--url", runtime.url)
    assert removed.exit_code == 0, removed.output
    assert "hold" not in http.get(f"{API}/llm-tasks/{waiting['id']}").json()
    assert bloom("budget", "remove", "cli-budgeted", "--url", runtime.url).exit_code == 1
    assert bloom("budget", "set", "x", "--url", runtime.url).exit_code == 1


def test_policy_set_show_remove_and_a_task_gets_the_defaults(runtime, http):
    made = bloom(
        "policy", "set", "cli-tools", "--allow", "Read", "--deny", "Bash(git push:*)",
        "--deny", "WebFetch", "--mode", "plan", "--max-turns", "5", "--url", runtime.url,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    assert "deny: Bash(git push:*), WebFetch" in made.stdout
    shown = bloom("policy", "show", "cli-tools", "--json", "--url", runtime.url)
    policy = json.loads(shown.stdout)
    assert (policy["allow"], policy["mode"], policy["max_turns"]) == (["Read"], "plan", 5)
    task = create(http, agent_slug="cli-tools", policy={"tools": {"allow": ["WebFetch"]}})
    assert task["policy"]["tools"]["allow"] == ["Read"]  # the project's deny won
    asked = bloom("policy", "set", "cli-tools", "--ask", "Bash", "--url", runtime.url)
    assert asked.exit_code == 0, asked.output
    assert "ask: Bash" in asked.stdout
    bad = bloom("policy", "set", "cli-tools", "--deny", "Bash(", "--url", runtime.url)
    assert bad.exit_code == 1
    assert "Bash(" in bad.stderr
    removed = bloom("policy", "remove", "cli-tools", "--url", runtime.url)
    assert removed.exit_code == 0, removed.output
    assert bloom("policy", "show", "cli-tools", "--url", runtime.url).exit_code == 1


@pytest.fixture
def keyed_runtime(sqlite_template: Path, tmp_path: Path) -> Iterator[RuntimeProcess]:
    process = RuntimeProcess(
        fresh_sqlite_url(sqlite_template, tmp_path), tmp_path, RUNTIME_API_KEY="s3cret-key"
    )
    process.start()
    yield process
    process.stop()


def test_api_key_from_the_environment_and_401_without_it(keyed_runtime):
    refused = bloom("task", "list", "--url", keyed_runtime.url)
    assert refused.exit_code == 2
    assert "401" in refused.stderr
    assert "BLOOM_API_KEY" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    for name in ("BLOOM_API_KEY", "RUNTIME_API_KEY"):
        allowed = bloom(
            "task", "submit", "keyed", "--url", keyed_runtime.url, **{name: "s3cret-key"}
        )
        assert allowed.exit_code == 0, allowed.output
        assert "s3cret-key" not in allowed.output
