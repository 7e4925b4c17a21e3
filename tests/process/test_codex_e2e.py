"""End to end with the real Codex CLI (`@openai/codex` at its pinned version, from the project
cache) run by a real `bloom worker run`, the echo model answering its Responses API calls."""

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from bloom.worker.agents.codex.install import PINNED_VERSION
from tests.support.cancel import check_a_cancel_stops_the_run
from tests.support.codex import MODEL, codex_binary, codex_worker_env
from tests.support.db import DatabaseProbe
from tests.support.required import unavailable
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def codex() -> Path:
    path = codex_binary()
    if path is None:
        unavailable("the Codex CLI is not installed: `bloom agents install codex`")
    return path


def agent_events(stack: Stack, task_id: str) -> list[dict[str, Any]]:
    events = stack.http.get(f"/llm-tasks/{task_id}/events", params={"follow": "false"})
    found = []
    lines = events.text.splitlines()
    for kind, data in itertools.pairwise(lines):
        if kind == "event: agent" and data.startswith("data: "):
            found.append(json.loads(data[len("data: ") :])["data"])
    return found


def test_a_codex_task_answers_streams_counts_and_resumes_its_session(
    stack: Stack, probe: DatabaseProbe, codex: Path
) -> None:
    stack.add_worker("w1", **codex_worker_env(codex, stack.model.url))
    worker = stack.http.get("/workers/w1").json()
    assert worker["capabilities"]["clis"]["codex"] == PINNED_VERSION

    first = stack.submit("hello codex", cli="codex", context_id="ctx-codex")
    done = stack.wait(first, timeout=90)
    assert done["status"] == "completed", (done, stack.logs()[-4000:])
    assert done["cli"] == "codex"
    assert stack.output(first) == "echo: hello codex"
    assert done["session_id"]

    # live output: normalised events, as the CLI printed them
    kinds = [event.get("kind") for event in agent_events(stack, first)]
    assert kinds[0] == "session"
    assert {"text", "usage", "result"} <= set(kinds), kinds
    texts = [e["text"] for e in agent_events(stack, first) if e.get("kind") == "text"]
    assert texts == ["echo: hello codex"]

    # usage, and its cost from the price table for the model the worker runs
    (result,) = [r for r in probe.results() if r["task_id"] == first]
    assert result["status"] == "success"
    assert result["tokens_used"] > 0
    assert result["metrics"]["input_tokens"] > 0
    assert result["cost_usd"] is not None
    assert result["cost_usd"] > 0
    assert result["model"] == MODEL

    # the context's next task resumes the CLI's session: the model sees the earlier turn
    second = stack.submit("and again", cli="codex", context_id="ctx-codex")
    again = stack.wait(second, timeout=90)
    assert again["status"] == "completed", (again, stack.logs()[-4000:])
    assert stack.output(second) == "echo: and again"
    assert again["session_id"] == done["session_id"]
    last = stack.model.requests()[-1]
    assert "echo: hello codex" in json.dumps(last["input"])


def test_a_codex_tool_call_runs_and_its_result_is_shown(
    stack: Stack, codex: Path, tmp_path: Path
) -> None:
    stack.add_worker("w1", **codex_worker_env(codex, stack.model.url))
    call = json.dumps({"cmd": "echo made-by-codex"})
    task_id = stack.submit(f"[[tool exec_command {call}]]", cli="codex")
    done = stack.wait(task_id, timeout=90)
    assert done["status"] == "completed", (done, stack.logs()[-4000:])
    assert "made-by-codex" in stack.output(task_id)
    events = agent_events(stack, task_id)
    calls = [e for e in events if e.get("kind") == "tool_call"]
    results = [e for e in events if e.get("kind") == "tool_result"]
    assert calls
    assert calls[0]["name"] == "shell"
    assert "made-by-codex" in calls[0]["input"]["command"]
    assert results
    assert "made-by-codex" in results[0]["output"]
    assert results[0]["is_error"] is False


def test_codex_timeout_cancel_usage_limit_and_refused_policy(
    stack: Stack, probe: DatabaseProbe, codex: Path
) -> None:
    worker = stack.add_worker("w1", **codex_worker_env(codex, stack.model.url))
    # a policy the CLI has no flag for: refused, never run without it
    refused = stack.submit(
        "careful", cli="codex", policy={"tools": {"deny": ["Bash(rm:*)"]}}, max_attempts=1
    )
    task = stack.wait(refused, timeout=60)
    assert task["status"] in ("failed", "dead"), task
    assert "no per-tool allow or deny rules" in task["last_error"]

    # a timeout kills it
    slow = stack.submit("hang [[sleep 60]]", cli="codex", policy={"timeout_sec": 3}, max_attempts=1)
    task = stack.wait(slow, timeout=60)
    assert task["status"] in ("failed", "dead"), task
    errors = [r for r in probe.results() if r["task_id"] == slow]
    assert [(r["error_code"], r["error_message"]) for r in errors] == [
        ("timeout", "Timed out after 3s")
    ]

    # a cancel while it waits for the model stops it, its processes with it
    check_a_cancel_stops_the_run(stack, worker, "codex")

    # a ChatGPT plan's usage limit parks the task until the time the CLI says
    reset = int(time.time()) + 3600
    limited = stack.submit(f"limited [[usage-limit {reset}]]", cli="codex")
    wait_for(lambda: [r for r in probe.results() if r["task_id"] == limited], 60, "its result")
    parked = stack.task(limited)
    assert parked["status"] == "queued"
    assert parked["attempts"] == 0
    assert "usage limit" in parked["last_error"]
    # the CLI says the minute, in local time: the reset is within that minute
    assert abs(parked["not_before"] - reset * 1000) < 60_000
