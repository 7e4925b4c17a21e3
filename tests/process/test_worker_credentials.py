"""A real worker whose real Claude CLI has no credentials: it says what to do, registers as not
ready (nothing is leased to it), and a run that fails to authenticate fails at once."""

import os
import subprocess
import sys
import time

import pytest

from tests.support.db import DatabaseProbe
from tests.support.stack import Stack
from tests.support.worker import WorkerProcess

CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


def start_worker(stack: Stack, name: str, **env: str) -> WorkerProcess:
    """`bloom worker run` with an empty HOME, none of the user's credentials, and `env`."""
    worker = WorkerProcess(
        name, stack.data_dir, stack.runtime.url, stack.model.url, stack.claude, **env
    )
    for variable in CREDENTIALS:
        if variable not in env:
            worker.env.pop(variable, None)
    worker.start()
    stack.workers[name] = worker
    return worker


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_worker_without_credentials_says_so_and_takes_no_task(stack: Stack) -> None:
    worker = start_worker(stack, "nokey")
    warning = next(line for line in worker.log().splitlines() if "claude_not_ready" in line)
    assert "ANTHROPIC_API_KEY" in warning, warning
    assert "make demo" in warning, warning
    registered = stack.http.get("/workers/nokey").json()
    capabilities = registered["capabilities"]
    assert (registered["status"], capabilities["ready"]) == ("online", False)
    assert "ANTHROPIC_API_KEY" in capabilities["not_ready"]
    assert capabilities["claude_cli"] is True
    task_id = stack.submit("never leased")
    time.sleep(2)
    assert stack.http.get(f"/llm-tasks/{task_id}").json()["status"] == "queued"
    listed = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "worker", "list", "--url", stack.runtime.url],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=True,
    )
    assert "online, not ready" in listed.stdout, listed.stdout
    assert "nokey is not ready: The Claude CLI has no credentials" in listed.stderr


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_run_that_cannot_authenticate_fails_at_once_with_the_advice(
    stack: Stack, probe: DatabaseProbe
) -> None:
    """An OAuth token the CLI ignores in `--bare` mode: the worker finds a credential, the CLI
    none, and says "Not logged in"."""
    start_worker(stack, "badauth", CLAUDE_CODE_OAUTH_TOKEN="not-read-in-bare-mode")
    task_id = stack.submit("hello")
    task = stack.wait(task_id, timeout=60)
    assert (task["status"], task["attempts"]) == ("failed", 1), (task, stack.logs()[-3000:])
    [result] = probe.results()
    assert result["error_code"] == "auth_failed"
    assert "Not logged in" in result["error_message"]
    assert "ANTHROPIC_API_KEY" in result["error_message"]
    assert "/login" not in result["error_message"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_worker_that_waits_gives_the_task_back_and_takes_no_more(
    stack: Stack, probe: DatabaseProbe
) -> None:
    """BLOOM_WORKER_ON_AUTH_FAILURE=wait: the attempt that cannot authenticate is not counted,
    the task is queued again (not failed), and the worker says it is not ready."""
    start_worker(
        stack,
        "waiter",
        CLAUDE_CODE_OAUTH_TOKEN="not-read-in-bare-mode",
        BLOOM_WORKER_ON_AUTH_FAILURE="wait",
    )
    assert stack.http.get("/workers/waiter").json()["capabilities"]["ready"] is True
    task_id = stack.submit("hello")
    deadline = time.monotonic() + 60
    while not probe.results() and time.monotonic() < deadline:
        time.sleep(0.2)
    [result] = probe.results()
    assert result["error_code"] == "rate_limited", result
    assert "Not logged in" in result["error_message"]
    assert "BLOOM_WORKER_ON_AUTH_FAILURE=wait" in result["error_message"]
    task = stack.http.get(f"/llm-tasks/{task_id}").json()
    assert (task["status"], task["attempts"]) == ("queued", 0), (task, stack.logs()[-3000:])
    capabilities = stack.http.get("/workers/waiter").json()["capabilities"]
    assert capabilities["ready"] is False
    assert "takes no task until they change" in capabilities["not_ready"]
    time.sleep(3)  # past the task's short delay: still not taken again, nor failed
    task = stack.http.get(f"/llm-tasks/{task_id}").json()
    assert (task["status"], task["attempts"]) == ("queued", 0), task
