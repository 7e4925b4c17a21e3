"""How a task is shown while it runs (`bloom task submit --wait`, `bloom task watch`), without a
server: the rendering of progress and events, and following a runtime with no events stream (or
none more for this caller)."""

import io
import json

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from bloom.cli.main import app
from bloom.cli.remote import ago
from bloom.cli.task import task_body
from bloom.cli.watch import TaskView, follow
from bloom.clients.runtime import RuntimeClient, TaskEvent
from tests.support.wire import task, task_json


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def view() -> tuple[TaskView, io.StringIO, Clock]:
    buffer = io.StringIO()
    clock = Clock()
    console = Console(file=buffer, width=200, color_system=None, highlight=False)
    return TaskView(console, clock=clock), buffer, clock


def test_progress_lines_only_when_something_changed():
    shown, buffer, clock = view()
    shown.status(task("queued"))
    shown.status(task("queued"))
    clock.now += 1.5
    shown.status(task("leased", worker_id="w1", attempts=1))
    clock.now += 0.5
    shown.status(task("running", worker_id="w1", attempts=1))
    shown.status(task("running", worker_id="w1", attempts=1))
    clock.now += 2
    shown.status(task("queued", attempts=1, last_error="Timed out after 120s"))
    shown.status(task("completed", attempts=2))
    assert buffer.getvalue().splitlines() == [
        "  0.0s queued",
        "  1.5s leased to w1",
        "  2.0s running on w1",
        "  4.0s queued again for attempt 2: Timed out after 120s",
        "  4.0s completed",
    ]


def test_events_are_rendered_for_people():
    shown, buffer, _ = view()
    events = [
        ("started", {"worker_id": "w1", "lease_id": "l1", "attempt": 2, "resumed_session": True}),
        ("claude", {"type": "system", "subtype": "init", "tools": ["Read"]}),
        ("claude", {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 10}),
        (
            "claude",
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "thinking", "thinking": "hmm"},
                        {"type": "text", "text": "Hello [bold]world[/bold]"},
                        {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
                    ]
                },
            },
        ),
        ("claude", {"type": "user", "message": {"content": [{"type": "tool_result"}]}}),
        ("claude", {"type": "result", "result": "Hello"}),
        ("stderr", {"line": "warning: [x]"}),
        (
            "finished",
            {
                "status": "error",
                "error_code": "timeout",
                "error": "Timed out after 5s",
                "duration_ms": 5000,
                "cost_usd": None,
                "tokens_used": None,
            },
        ),
        ("something-new", {"whatever": 1}),
        ("claude", "not an object"),
        ("started", None),
    ]
    for seq, (kind, data) in enumerate(events, 1):
        shown.event(TaskEvent(seq, kind, data))
    assert buffer.getvalue().splitlines() == [
        "  0.0s started on w1, attempt 2, resuming this context's session",
        "↻ API retry 2/10",
        "Hello [bold]world[/bold]",
        "→ tool Bash",
        "warning: [x]",
        "  0.0s run finished: error (5.0s)",
        "  timeout: Timed out after 5s",
        "  0.0s started on ?, attempt None",
    ]
    assert shown.streamed


def test_ago():
    assert ago(None) == "-"
    assert ago(1_000, now_ms=13_000) == "12s ago"
    assert ago(0 + 1, now_ms=5 * 60_000) == "5m ago"
    assert ago(1, now_ms=3 * 3_600_000) == "3h ago"
    assert ago(1, now_ms=2 * 86_400_000) == "2d ago"
    assert ago(60_000, now_ms=20_000) == "in 40s"


def test_task_body_leaves_unset_options_to_the_runtime():
    body = task_body("hi", context="c1")
    assert body == {"context_id": "c1", "agent_slug": "default", "prompt": "hi",
                    "desired_format": "text"}  # fmt: skip
    assert task_body("hi")["context_id"].startswith("ctx-")
    assert task_body("hi", budget=1)["policy"] == {"budget": 1.0}


@pytest.mark.parametrize("refusal", [404, 429])
async def test_follow_polls_a_runtime_without_an_events_stream_or_one_more(refusal: int):
    """A runtime without the stream (404), or refusing this caller one more (429): polled."""
    states = iter(["queued", "running", "completed"])
    current = {"status": "queued"}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(refusal, headers={"Retry-After": "5"}, json={"error": "No"})
        if request.url.path == "/api/runtime/llm-tasks/t1":
            current["status"] = next(states, "completed")
            body = task_json(current["status"], worker_id="w1")
            return httpx.Response(200, content=json.dumps(body))
        return httpx.Response(500)

    shown, buffer, _ = view()
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(handler)) as client:
        final = await follow(client, "t1", shown, poll_sec=0.01)
    assert final.status == "completed"
    lines = [line.split(maxsplit=1)[1] for line in buffer.getvalue().splitlines()]
    assert lines == ["queued", "running on w1", "completed"]


def test_worker_run_settings_errors_are_one_red_line():
    result = CliRunner().invoke(app, ["worker", "run"], env={"BLOOM_WORKER_CONCURRENCY": "99"})
    assert result.exit_code == 2
    assert result.stderr.startswith("bloom: invalid settings: BLOOM_WORKER_CONCURRENCY")
    assert len(result.stderr.strip().splitlines()) == 1
    bad_name = CliRunner().invoke(app, ["worker", "run", "--name", "no spaces"])
    assert bad_name.exit_code == 2
    assert "letters, digits" in bad_name.stderr
