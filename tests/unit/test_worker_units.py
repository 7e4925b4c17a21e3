"""The worker's pure parts: outcome classification, prompt and hints, argv and environment,
the session book, and the echo model's scripting."""

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.clients.runtime import RuntimeClient
from bloom.domain.retry import ErrorCode
from bloom.worker import conversations
from bloom.worker.agent import Worker
from bloom.worker.agents.claude.env import child_environment
from bloom.worker.agents.claude.invocation import Invocation, known_agent
from bloom.worker.agents.claude.outcome import classify_error, decide
from bloom.worker.agents.outcome import Outcome, RunReport, fit_output, json_output
from bloom.worker.conversations import ConversationBook
from bloom.worker.echo_model import Script, next_tool_call, tool_results
from bloom.worker.outbox import MAX_BATCH, MAX_BATCH_BYTES, EventOutbox, _batch, _bounded
from bloom.worker.prompt import MAX_FILE_BYTES, build_prompt, resolve_hints
from bloom.worker.settings import WorkerSettings
from bloom.worker.task_run import Features, Pause, TaskRun
from tests.support.wire import complete_reply, grant, grant_json, lease_json


def result(text: str | None, *, is_error: bool = False, **extra: object) -> dict[str, object]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": is_error,
        "result": text,
        "session_id": "s-1",
        "total_cost_usd": 0.0021,
        "num_turns": 1,
        "usage": {"input_tokens": 40, "cache_read_input_tokens": 2, "output_tokens": 5},
    } | extra


def report(res: dict[str, object] | None = None, **kwargs: object) -> RunReport:
    values: dict[str, object] = {"exit_code": 0, "duration_ms": 1200, "result": res} | kwargs
    return RunReport(**values)  # type: ignore[arg-type]


def test_success_carries_output_session_and_metrics() -> None:
    outcome = decide(report(result("echo: hi")), desired_format="text", budget_usd=0)
    assert outcome.success
    assert outcome.output == "echo: hi"
    assert outcome.session_id == "s-1"
    assert outcome.metrics == {
        "duration_ms": 1200,
        "tokens_used": 47,
        "input_tokens": 42,
        "output_tokens": 5,
        "cost_usd": 0.0021,
        "num_turns": 1,
    }
    body = outcome.completion("l1", "w1").to_json()
    assert body["status"] == "success"
    assert "error_code" not in body
    assert "model" not in body["metrics"]
    assert (body["lease_id"], body["worker_id"]) == ("l1", "w1")


def test_the_model_reported_is_the_one_that_cost_the_most() -> None:
    per_model = {
        "claude-small": {"costUSD": 0.001, "outputTokens": 90},
        "claude-main": {"costUSD": 0.02, "outputTokens": 10},
        "": {"costUSD": 9},
    }
    outcome = decide(
        report(result("hi", modelUsage=per_model)), desired_format="text", budget_usd=0
    )
    assert outcome.metrics["model"] == "claude-main"
    for odd in ({}, "claude", {"x": "not a dict"}):
        metrics = decide(report(result("hi", modelUsage=odd)), desired_format="text", budget_usd=0)
        assert metrics.metrics.get("model") == ("x" if odd == {"x": "not a dict"} else None)


@pytest.mark.parametrize(
    ("text", "code", "retry_at"),
    [
        (
            "API Error: Request rejected (429) · Claude AI usage limit reached|1900000000",
            ErrorCode.USAGE_LIMIT,
            1_900_000_000_000,
        ),
        ("Claude AI usage limit reached", ErrorCode.USAGE_LIMIT, None),
        ("API Error: 529 Overloaded. This is a server-side issue", ErrorCode.RATE_LIMITED, None),
        ("API Error: 429 rate_limit_error", ErrorCode.RATE_LIMITED, None),
        ("API Error: 400 prompt is too long", ErrorCode.CLI_ERROR, None),
    ],
)
def test_errors_are_classified(text: str, code: ErrorCode, retry_at: int | None) -> None:
    assert classify_error(text) == (code, retry_at)
    outcome = decide(
        report(result(text, is_error=True), exit_code=1), desired_format="text", budget_usd=0
    )
    assert not outcome.success
    assert (outcome.error_code, outcome.retry_at, outcome.error_message) == (code, retry_at, text)


def test_the_turn_limit_fails_the_task_without_a_retry() -> None:
    """The pinned CLI's result when `--max-turns` stops it (seen: exit 1, `errors` set): a
    retry would stop at the same limit, so it is not retried, and says why."""
    stopped = result(
        None,
        is_error=True,
        subtype="error_max_turns",
        num_turns=2,
        errors=["Reached maximum number of turns (1)"],
    )
    outcome = decide(report(stopped, exit_code=1), desired_format="text", budget_usd=0)
    assert outcome.error_code is ErrorCode.FATAL
    assert outcome.error_message == (
        "Reached maximum number of turns (1): the task's turn limit (policy.tools.max_turns) "
        "stopped it"
    )


def test_budget_timeout_cancel_and_missing_result() -> None:
    over = result(None, is_error=True, subtype="error_max_budget_usd", total_cost_usd=4.0002)
    outcome = decide(report(over, exit_code=1), desired_format="text", budget_usd=0.01)
    assert outcome.error_code is ErrorCode.BUDGET_EXCEEDED
    assert outcome.error_message == "Budget exceeded: spent $4.0002 of $0.01"
    # a run that ends over budget without the CLI noticing is over budget all the same
    pricey = decide(report(result("ok", total_cost_usd=0.5)), desired_format="text", budget_usd=0.1)
    assert pricey.error_code is ErrorCode.BUDGET_EXCEEDED

    timed_out = decide(
        report(None, exit_code=-15, timed_out=True, timeout_sec=3),
        desired_format="text",
        budget_usd=0,
    )
    assert (timed_out.error_code, timed_out.error_message) == (
        ErrorCode.TIMEOUT,
        "Timed out after 3s",
    )
    cancelled = decide(
        report(None, exit_code=-15, cancelled=True), desired_format="text", budget_usd=0
    )
    assert cancelled.error_code is ErrorCode.CANCELLED

    crashed = decide(
        report(None, exit_code=1, stderr_tail="--agent 'x' not found"),
        desired_format="text",
        budget_usd=0,
    )
    assert crashed.error_code is ErrorCode.CLI_ERROR
    assert crashed.error_message == "Claude CLI exited with code 1: --agent 'x' not found"
    assert crashed.metrics == {"duration_ms": 1200, "tokens_used": None}


def test_json_output_is_validated_and_unfenced() -> None:
    assert json_output('{"a": 1}') == '{"a": 1}'
    assert json_output('```json\n{"a": [1, 2]}\n```') == '{"a": [1, 2]}'
    assert json_output("echo: not json") is None
    good = decide(report(result('```json\n{"ok": true}\n```')), desired_format="json", budget_usd=0)
    assert good.success
    assert json.loads(good.output or "") == {"ok": True}
    bad = decide(report(result("echo: hi")), desired_format="json", budget_usd=0)
    assert bad.error_code is ErrorCode.INVALID_OUTPUT


def test_hints_resolve_to_files_inside_the_project(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "a.py").write_text("A = 1\n")
    (project / "src" / "b.py").write_text("B = 2\n")
    (project / "README.md").write_text("# readme\n")
    (project / "big.txt").write_text("x" * (MAX_FILE_BYTES + 1))
    (tmp_path / "secret.txt").write_text("outside")

    context = resolve_hints(
        ["src/*.py", "README.md", "../secret.txt", "/etc/passwd", "big.txt", "the billing module"],
        project,
    )
    assert context.files == {
        "src/a.py": "A = 1\n",
        "src/b.py": "B = 2\n",
        "README.md": "# readme\n",
    }
    assert context.notes == ["../secret.txt", "/etc/passwd", "the billing module"]
    assert context.skipped == ["big.txt"]

    prompt = build_prompt("Explain.", context)
    assert prompt.startswith('Context files:\n<file path="src/a.py">\nA = 1\n\n</file>')
    assert "Context:\n- ../secret.txt\n- /etc/passwd\n- the billing module" in prompt
    assert "outside" not in prompt
    assert prompt.endswith("Not included (too large or unreadable): big.txt\n\nExplain.")
    # without a project directory every hint is a plain note, as in the seed
    assert build_prompt("P", resolve_hints(["src/a.py"], None)) == "Context:\n- src/a.py\n\nP"


def test_the_prompt_never_reaches_argv_and_secrets_never_reach_the_child(tmp_path: Path) -> None:
    invocation = Invocation(
        binary="/bin/claude",
        prompt="do the secret thing",
        cwd=tmp_path,
        env={},
        timeout_sec=5,
        resume="s-1",
        agent="Plan",
        budget_usd=0.25,
        extra_args=["--bare"],
    )
    assert invocation.argv() == [
        "/bin/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--bare",
        "--resume",
        "s-1",
        "--agent",
        "Plan",
        "--max-budget-usd",
        "0.25",
    ]
    env = child_environment(
        {
            "PATH": "/usr/bin",
            "ANTHROPIC_API_KEY": "claude-own",
            "RUNTIME_API_KEY": "k1",
            "BLOOM_WORKER_API_KEY": "k2",
            "MEMBRIDGE_ADMIN_KEY": "k3",
            "BLOOM_MEMBRIDGE_ADMIN_KEY": "k4",
            "DATABASE_URL": "postgresql://u:p@h/db",
        },
        "reviewer",
    )
    assert env == {
        "PATH": "/usr/bin",
        "ANTHROPIC_API_KEY": "claude-own",
        "CLAUDE_PROJECT_ID": "reviewer",
    }


def test_agents_are_named_only_when_the_cli_knows_them(tmp_path: Path) -> None:
    (tmp_path / "reviewer.md").write_text("---\nname: reviewer\n---\n")
    assert known_agent("Plan", [])
    assert known_agent("reviewer", [tmp_path])
    assert not known_agent("default-project", [tmp_path])
    assert not known_agent("../reviewer", [tmp_path])


def test_the_conversation_book_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "w" / "sessions.json"
    book = ConversationBook(path)
    assert book.get("ctx") is None
    book.set("ctx", "s-1")
    book.set("other", "s-2")
    again = ConversationBook(path)
    assert (again.get("ctx"), again.get("other")) == ("s-1", "s-2")
    again.forget("ctx")
    assert ConversationBook(path).get("ctx") is None
    path.write_text("not json")
    assert ConversationBook(path).get("other") is None


def test_the_conversation_book_appends_a_line_per_change_and_is_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change is one line appended, the map never written whole on the way; the earlier
    format (one JSON object, no newline) is read, and a line cut short by a crash passed over;
    the file is written whole at start and once the lines appended outnumber the contexts."""
    path = tmp_path / "sessions.json"
    path.write_text(json.dumps({"a": "s-a", "b": "s-b"}))
    book = ConversationBook(path)
    assert path.read_text() == '{"a": "s-a", "b": "s-b"}\n'
    book.set("c", "s-c")
    book.forget("a")
    book.set("c", "s-c")  # no change, no line
    assert path.read_text().splitlines()[1:] == ['{"c": "s-c"}', '{"a": null}']
    with path.open("a") as file:
        file.write('{"b": "s-b2"}\n{"d": "s-')
    again = ConversationBook(path)
    assert [again.get(c) for c in "abcd"] == [None, "s-b2", "s-c", None]
    assert path.read_text() == '{"b": "s-b2", "c": "s-c"}\n'
    monkeypatch.setattr(conversations, "COMPACT_AFTER", 3)
    for n in range(4):
        again.set("b", f"s-{n}")
    assert path.read_text() == '{"b": "s-3", "c": "s-c"}\n'


def test_echo_model_directives() -> None:
    assert Script.parse("plain") == Script()
    script = Script.parse(
        "x [[sleep 1.5]] [[tokens 900]] [[usage-limit 1900000000]] [[overloaded]]"
    )
    assert script == Script(
        sleep_sec=1.5, output_tokens=900, overloaded=True, usage_limit_reset=1_900_000_000
    )


async def test_a_complete_is_retried_until_the_runtime_takes_it(tmp_path: Path) -> None:
    """Unreachable and 503 are retried; the body names the lease and the worker every time."""
    seen: list[dict[str, object]] = []

    def runtime(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(200, json={"task_id": "t1", "last_seq": 1, "accepted": 1})
        seen.append(json.loads(request.content))
        if len(seen) == 1:
            raise httpx.ConnectError("connection refused")
        if len(seen) == 2:
            return httpx.Response(503, json={"error": "Storage unavailable"})
        return httpx.Response(200, json={})

    settings = WorkerSettings(name="w1", data_dir=tmp_path)
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        run = TaskRun(settings, client, ConversationBook(tmp_path / "s.json"), Pause(), grant())
        await run._report(Outcome(True, output="echo: hi", metrics={"duration_ms": 5}))
    assert len(seen) == 3
    assert all(body["lease_id"] == "l1" and body["worker_id"] == "w1" for body in seen)
    assert seen[-1]["status"] == "success"
    assert seen[-1]["output"] == "echo: hi"


async def test_a_task_asks_the_runtime_a_heartbeat_and_the_complete_with_its_events(
    tmp_path: Path,
) -> None:
    """The round trips a quick task makes: the heartbeat that confirms the lease, sent as the
    CLI starts (the CLI has started before it is answered, and gets its prompt after), then the
    complete carrying the run's events, `finished` last: no events post on the way."""
    cli = tmp_path / "claude"
    began = tmp_path / "began"
    cli.write_text(
        f"#!/bin/sh\ntouch {began}\ncat > /dev/null\necho '{json.dumps(result('hi'))}'\n"
    )
    cli.chmod(0o755)
    asked: list[str] = []
    completes: list[dict[str, Any]] = []
    started_first: list[bool] = []

    async def runtime(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path.rsplit("/", 1)[-1])
        if asked[-1] == "heartbeat":
            await wait_until(began.exists)
            started_first.append(began.exists())
            return httpx.Response(200, json={"lease": lease_json(), "expires_at": 301_000})
        if asked[-1] == "complete":
            completes.append(json.loads(request.content))
        return httpx.Response(200, json={})

    settings = WorkerSettings(name="w1", data_dir=tmp_path, claude_bin=str(cli))
    book = ConversationBook(tmp_path / "s.json")
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        await TaskRun(settings, client, book, Pause(), grant()).run()
    assert asked == ["heartbeat", "complete"]
    assert started_first == [True]
    (body,) = completes
    assert [event["type"] for event in body["events"]] == ["started", "claude", "finished"]
    assert body["events"][-1]["data"]["status"] == "success"
    assert "claim_next" not in body  # a run with no slot to fill (pushed) asks for none


async def wait_until(check: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("answer", [409, "cancel"])
async def test_the_prompt_waits_for_the_first_heartbeat_and_never_goes_to_a_refused_lease(
    tmp_path: Path, answer: int | str
) -> None:
    """The CLI starts while the first heartbeat is out; a refused lease (409) kills it before
    it reads its prompt, and nothing is reported; a cancelled task is reported cancelled."""
    cli = tmp_path / "claude"
    began, prompt = tmp_path / "began", tmp_path / "prompt"
    # the prompt's file exists before `began` does: a kill right after `touch` leaves it empty
    cli.write_text(
        f"#!/bin/sh\n: > {prompt}\ntouch {began}\ncat >> {prompt}\n"
        f"echo '{json.dumps(result('x'))}'\n"
    )
    cli.chmod(0o755)
    asked: list[str] = []
    completes: list[dict[str, Any]] = []

    async def runtime(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path.rsplit("/", 1)[-1])
        if asked[-1] == "heartbeat":
            await wait_until(began.exists)
            if answer == 409:
                return httpx.Response(409, json={"error": "Lease l1 is no longer active"})
            beat = {"lease": lease_json(), "expires_at": 301_000, "cancel_requested": True}
            return httpx.Response(200, json=beat)
        completes.append(json.loads(request.content))
        return httpx.Response(200, json={})

    settings = WorkerSettings(name="w1", data_dir=tmp_path, claude_bin=str(cli))
    book = ConversationBook(tmp_path / "s.json")
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        await TaskRun(settings, client, book, Pause(), grant()).run()
    assert began.exists()
    assert prompt.read_text() == ""  # started, never fed
    if answer == 409:
        assert asked == ["heartbeat"]
    else:
        assert asked == ["heartbeat", "complete"]
        assert completes[0]["error_code"] == "cancelled"
        assert completes[0]["error_message"] == "Cancelled before it started"


async def test_a_free_slot_takes_the_next_task_from_the_complete(tmp_path: Path) -> None:
    """With a free slot the complete asks for the next task (no wait) and hands it back; a
    runtime that refuses the new fields (an older one) gets the events posted first and a plain
    complete, and no more extras after that."""
    bodies: list[dict[str, Any]] = []
    posted: list[list[str]] = []
    unknown = {"error": {"formErrors": [], "fieldErrors": {"events": ["Unrecognized key"]}}}
    answers = [
        httpx.Response(200, json=complete_reply(next=grant_json("t2", "l2"))),
        httpx.Response(400, json=unknown),
        httpx.Response(200, json=complete_reply()),
        httpx.Response(200, json=complete_reply()),
    ]

    def runtime(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            posted.append([event["type"] for event in json.loads(request.content)["events"]])
            return httpx.Response(200, json={"task_id": "t1", "last_seq": 2, "accepted": 2})
        bodies.append(json.loads(request.content))
        return answers.pop(0)

    settings = WorkerSettings(name="w1", data_dir=tmp_path, lease_ttl_sec=90)
    done = Outcome(True, output="x", metrics={"duration_ms": 5})
    features = Features()
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:

        def run() -> TaskRun:
            book = ConversationBook(tmp_path / "s.json")
            grant_, takes_next = grant(), lambda task: True
            return TaskRun(
                settings, client, book, Pause(), grant_, claim_next=takes_next, features=features
            )

        following = await run()._report(done)
        assert following is not None
        assert (following.task.id, following.lease.id) == ("t2", "l2")
        assert bodies[0]["claim_next"] == {"wait_seconds": 0.0, "ttl_seconds": 90}
        assert [event["type"] for event in bodies[0]["events"]] == ["finished"]

        assert await run()._report(done) is None  # refused, then sent plainly
        assert posted == [["finished"]]
        assert "events" not in bodies[2]
        assert "claim_next" not in bodies[2]
        assert not features.complete_extras
        await run()._report(done)
        assert posted == [["finished"], ["finished"]]
        assert "events" not in bodies[3]


async def test_events_that_would_not_fit_beside_a_large_output_are_posted_first(
    tmp_path: Path,
) -> None:
    posted: list[int] = []
    bodies: list[dict[str, Any]] = []

    def runtime(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path.endswith("/events"):
            posted.append(len(body["events"]))
            return httpx.Response(200, json={"task_id": "t1", "last_seq": 1, "accepted": 1})
        bodies.append(body)
        return httpx.Response(200, json=complete_reply())

    settings = WorkerSettings(name="w1", data_dir=tmp_path)
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        run = TaskRun(settings, client, ConversationBook(tmp_path / "s.json"), Pause(), grant())
        for n in range(40):
            await run.outbox.add("assistant", {"text": "z" * 50_000, "n": n})
        output = "o" * (3 * 1024 * 1024 + 512 * 1024)  # leaves half a MiB for events
        await run._report(Outcome(True, output=output, metrics={"duration_ms": 5}))
    (body,) = bodies
    assert sum(posted) + len(body["events"]) == 41  # the 40, and `finished`, each once
    assert posted
    assert len(json.dumps(body["events"])) <= 512 * 1024
    assert len(json.dumps(body)) < 5 * 1024 * 1024


async def test_live_output_waits_out_a_restarting_runtime_behind_its_proxy() -> None:
    """nginx answers 502 while the runtime restarts: the events are kept for the next flush, as
    when the runtime cannot be reached at all; a 400 drops the batch (retrying cannot help)."""
    answers = [502, 503, 200, 400]
    posted: list[int] = []

    def runtime(request: httpx.Request) -> httpx.Response:
        status = answers.pop(0)
        posted.append(len(json.loads(request.content)["events"]))
        body = {"task_id": "t1", "last_seq": 2, "accepted": 2} if status == 200 else {"error": "x"}
        return httpx.Response(status, json=body)

    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        outbox = EventOutbox(client, "t1", "l1", "w1")
        await outbox.add("text", "a")
        await outbox.add("text", "b")
        await outbox.flush()  # 502
        await outbox.flush()  # 503
        assert len(outbox.pending) == 2
        await outbox.flush()  # 200
        assert outbox.pending == []
        await outbox.add("text", "c")
        await outbox.flush()  # 400
        assert outbox.pending == []
    assert posted == [2, 2, 2, 1]


async def test_a_flush_abandoned_by_its_caller_still_takes_its_batch_out() -> None:
    """The keeper is cancelled when the CLI ends, perhaps while its flush is being answered:
    the events the runtime stored then are not posted again, nor handed to the complete."""
    stored: list[str] = []
    answer = asyncio.Event()

    async def runtime(request: httpx.Request) -> httpx.Response:
        events = json.loads(request.content)["events"]
        stored.extend(event["data"] for event in events)  # stored before the answer is sent
        await answer.wait()
        return httpx.Response(200, json={"task_id": "t1", "last_seq": 1, "accepted": 1})

    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        outbox = EventOutbox(client, "t1", "l1", "w1")
        await outbox.add("text", "a")
        keeper = asyncio.create_task(outbox.flush())
        while not stored:
            await asyncio.sleep(0.001)
        keeper.cancel()  # the CLI ended: the keeper stops mid-post
        await outbox.add("text", "b")
        asyncio.get_running_loop().call_later(0.05, answer.set)
        taken = await outbox.last(room=10_000)
    assert stored + [event["data"] for event in taken] == ["a", "b"]  # each once, in order


async def test_a_refused_complete_is_not_retried(tmp_path: Path) -> None:
    calls = 0

    def runtime(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        if request.url.path.endswith("/complete"):
            calls += 1
            return httpx.Response(409, json={"error": "Lease l1 is no longer active (expired)"})
        return httpx.Response(200, json={"task_id": "t1", "last_seq": 1, "accepted": 1})

    settings = WorkerSettings(name="w1", data_dir=tmp_path)
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        run = TaskRun(settings, client, ConversationBook(tmp_path / "s.json"), Pause(), grant())
        await run._report(Outcome(True, output="x", metrics={"duration_ms": 5}))
    assert calls == 1


async def test_a_worker_whose_key_is_refused_stops_at_once(tmp_path: Path) -> None:
    calls: list[str] = []

    def runtime(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(403, json={"error": "This key acts for worker 'w2', not 'w1'"})

    settings = WorkerSettings(name="w1", data_dir=tmp_path)
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        worker = Worker(settings, client)
        await worker.run()
    assert worker.refused
    assert calls == ["/api/runtime/workers"]


async def test_the_client_waits_out_a_rate_limit() -> None:
    replies = iter(
        [
            httpx.Response(429, headers={"Retry-After": "0.1"}, json={"error": "Too many"}),
            httpx.Response(200, json=[]),
        ]
    )
    transport = httpx.MockTransport(lambda request: next(replies))
    async with RuntimeClient("http://runtime", transport=transport) as client:
        assert await client.list_workers() == []


def test_event_batches_stay_well_under_the_runtimes_body_limit() -> None:
    """Big events go in several posts (about 1 MiB each), never one the runtime refuses (413)."""
    big = [_bounded("assistant", {"text": "x" * 50_000}) for _ in range(200)]
    first = _batch(big)
    assert 1 <= len(first) < len(big)
    assert len(json.dumps(first)) <= MAX_BATCH_BYTES
    small = [_bounded("assistant", {"n": i}) for i in range(MAX_BATCH + 10)]
    assert len(_batch(small)) == MAX_BATCH
    huge = [_bounded("assistant", "y" * 2_000_000)]  # a single one always goes (as a preview)
    assert _batch(huge) == huge


def test_an_output_too_large_for_the_runtime_is_cut_and_says_so() -> None:
    assert fit_output("short") == "short"
    huge = "é" * 1_000_000  # 6 bytes each as JSON: about 6 MB
    cut = fit_output(huge)
    assert len(json.dumps(cut)) <= 4 * 1024 * 1024
    assert cut.endswith(f"of {len(huge)} characters kept]")
    assert cut.startswith("é" * 1000)


def test_the_echo_model_scripts_tool_calls_one_per_turn() -> None:
    """`[[tool NAME {JSON}]]` directives are asked for in order, one per turn; "$id" is the id
    in the previous tool's JSON result; once each has its result, no more calls."""
    prompt = 'go [[tool a {"x": 1}]] [[tool b {"task_id": "$id", "y": "z"}]]'
    first = next_tool_call(prompt, [])
    assert first is not None
    assert (first.name, first.input) == ("a", {"x": 1})
    second = next_tool_call(prompt, ['{"id": "t-1", "status": "queued"}'])
    assert second is not None
    assert (second.name, second.input) == ("b", {"task_id": "t-1", "y": "z"})
    assert second.id != first.id
    assert next_tool_call(prompt, ["r1", "r2"]) is None
    assert next_tool_call("no tools here", []) is None


def test_the_echo_model_follows_the_newest_prompt_of_a_resumed_conversation() -> None:
    """Results of an earlier prompt's calls do not count against the newest prompt's script,
    wherever the CLI puts them (it merges a resumed session's turns)."""
    earlier = 'one [[tool Bash {"command": "true"}]]'
    newest = 'two [[tool Edit {"file_path": "a"}]] [[tool Bash {"command": "ls"}]]'
    old_call = next_tool_call(earlier, [])
    assert old_call is not None
    body: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": earlier},
            {"role": "assistant", "content": [{"type": "tool_use", "id": old_call.id}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": old_call.id, "content": "done"},
                    {"type": "text", "text": newest},
                ],
            },
        ]
    }
    assert tool_results(body, newest) == []
    assert tool_results(body, earlier) == ["done"]
    call = next_tool_call(newest, [])
    assert call is not None
    assert call.name == "Edit"
    assert call.id != old_call.id
    body["messages"][1]["content"].append({"type": "tool_use", "id": call.id})
    body["messages"][2]["content"].insert(
        1, {"type": "tool_result", "tool_use_id": call.id, "content": "edited"}
    )
    assert tool_results(body, newest) == ["edited"]
    second = next_tool_call(newest, tool_results(body, newest))
    assert second is not None
    assert second.name == "Bash"


def test_the_echo_model_scripts_the_demo_sentence_as_one_shell_call() -> None:
    """`add a FILE saying TEXT` writes TEXT to FILE in the run's directory, quoted for the
    shell; anything else, or a path, scripts nothing."""
    call = next_tool_call("add a hello.txt saying hi", [])
    assert call is not None
    assert (call.name, call.input) == ("Bash", {"command": "printf '%s\\n' hi > hello.txt"})
    quoted = next_tool_call("Add notes.md saying it's $HOME; rm -rf /", [])
    assert quoted is not None
    assert quoted.input["command"] == ("printf '%s\\n' 'it'\"'\"'s $HOME; rm -rf /' > notes.md")
    assert next_tool_call("add a ../x saying hi", []) is None
    assert next_tool_call("add a hello.txt saying hi", ["done"]) is None
