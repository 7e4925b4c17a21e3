"""End to end with the real Gemini CLI (`@google/gemini-cli` at its pinned version, from the
project cache) run by a real `bloom worker run`, the echo model answering its Gemini API calls.
One stack, one worker, for all of it: the CLI takes about two seconds to start."""

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from bloom.worker.agents.gemini.install import PINNED_VERSION
from tests.support.cancel import check_a_cancel_stops_the_run
from tests.support.db import DatabaseProbe
from tests.support.gemini import MODEL, gemini_binary, gemini_worker_env
from tests.support.required import unavailable
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def gemini() -> Path:
    path = gemini_binary()
    if path is None:
        unavailable("the Gemini CLI is not installed: `bloom agents install gemini`")
    return path


def agent_events(stack: Stack, task_id: str) -> list[dict[str, Any]]:
    events = stack.http.get(f"/llm-tasks/{task_id}/events", params={"follow": "false"})
    found = []
    for kind, data in itertools.pairwise(events.text.splitlines()):
        if kind == "event: agent" and data.startswith("data: "):
            found.append(json.loads(data[len("data: ") :])["data"])
    return found


def test_a_gemini_task_answers_streams_counts_resumes_calls_tools_and_fails_as_it_should(
    stack: Stack, probe: DatabaseProbe, gemini: Path
) -> None:
    node = stack.add_worker(
        "w1", **gemini_worker_env(gemini, stack.model.url, stack.data_dir / "gemini-home")
    )
    worker = stack.http.get("/workers/w1").json()
    assert worker["capabilities"]["clis"]["gemini"] == PINNED_VERSION

    first = stack.submit("hello gemini", cli="gemini", context_id="ctx-gemini")
    # submitted together, run one after the other by the one worker
    call = json.dumps({"command": "echo made-by-gemini"})
    tool = stack.submit(
        f"[[tool run_shell_command {call}]]",
        cli="gemini",
        policy={"tools": {"allow": ["Bash(echo:*)"]}},
    )
    refused = stack.submit(
        "careful", cli="gemini", policy={"tools": {"deny": ["Bash(rm:*)"]}}, max_attempts=1
    )
    slow = stack.submit(
        "hang [[sleep 60]]", cli="gemini", policy={"timeout_sec": 4}, max_attempts=1
    )

    done = stack.wait(first, timeout=90)
    assert done["status"] == "completed", (done, stack.logs()[-4000:])
    assert done["cli"] == "gemini"
    assert stack.output(first) == "echo: hello gemini"
    assert done["session_id"]

    # live output: normalised events, as the CLI printed them
    events = agent_events(stack, first)
    kinds = [event.get("kind") for event in events]
    assert kinds[0] == "session"
    assert events[0]["model"] == MODEL
    assert {"text", "usage", "result"} <= set(kinds), kinds
    assert [e["text"] for e in events if e.get("kind") == "text"] == ["echo: hello gemini"]

    # usage, and its cost from the price table for the model the CLI ran
    (result,) = [r for r in probe.results() if r["task_id"] == first]
    assert result["status"] == "success"
    assert result["tokens_used"] > 0
    assert result["metrics"]["input_tokens"] > 0
    assert result["cost_usd"] is not None
    assert result["cost_usd"] > 0
    assert result["model"] == MODEL

    # the context's next task continues the CLI's session: the model sees the earlier turn
    # (run in a directory of its own, a project of its own to the CLI: it imports the session
    # as a new one)
    second = stack.submit("and again", cli="gemini", context_id="ctx-gemini")
    again = stack.wait(second, timeout=90)
    assert again["status"] == "completed", (again, stack.logs()[-4000:])
    assert stack.output(second) == "echo: and again"
    assert again["session_id"]
    assert again["session_id"] != done["session_id"]
    last = stack.model.requests()[-1]
    assert "echo: hello gemini" in json.dumps(last["contents"])

    # a tool call the model asks for runs (allowed: `--allowed-tools run_shell_command(echo)`),
    # and its result is shown
    ran = stack.wait(tool, timeout=90)
    assert ran["status"] == "completed", (ran, stack.logs()[-4000:])
    assert "made-by-gemini" in stack.output(tool)
    events = agent_events(stack, tool)
    calls = [e for e in events if e.get("kind") == "tool_call"]
    results = [e for e in events if e.get("kind") == "tool_result"]
    assert [(c["name"], c["input"]) for c in calls] == [
        ("run_shell_command", {"command": "echo made-by-gemini"})
    ]
    assert [(r["id"], r["is_error"]) for r in results] == [(calls[0]["id"], False)]
    assert "made-by-gemini" in results[0]["output"]

    # a policy the CLI has no flag for: refused, never run without it
    task = stack.wait(refused, timeout=60)
    assert task["status"] in ("failed", "dead"), task
    assert "no flag for deny rules" in task["last_error"]

    # a timeout kills it
    task = stack.wait(slow, timeout=60)
    assert task["status"] in ("failed", "dead"), task
    errors = [r for r in probe.results() if r["task_id"] == slow]
    assert [(r["error_code"], r["error_message"]) for r in errors] == [
        ("timeout", "Timed out after 4s")
    ]

    # a cancel while it waits for the model stops it, its processes with it
    check_a_cancel_stops_the_run(stack, node, "gemini")

    # a spent quota parks the task until the delay the API gave ends (and the worker: last)
    reset = int(time.time()) + 3600
    limited = stack.submit(f"limited [[usage-limit {reset}]]", cli="gemini")
    wait_for(lambda: [r for r in probe.results() if r["task_id"] == limited], 60, "its result")
    parked = stack.task(limited)
    assert parked["status"] == "queued"
    assert parked["attempts"] == 0
    assert "exceeded your current quota" in parked["last_error"]
    assert abs(parked["not_before"] - reset * 1000) < 30_000
