"""The agent-CLI boundary: the Claude adapter builds the command line, reads the stream and
decides the outcome as the worker always did; the process runner and TaskRun serve any adapter
(a second, made-up one here), refusing what its CLI cannot do and never reporting a pause it
cannot take."""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from bloom.clients.runtime import RuntimeClient
from bloom.clients.wire import Policy
from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agent import Worker
from bloom.worker.agents.base import (
    AGENT_EVENT,
    AgentCli,
    Command,
    Decision,
    EventKind,
    Found,
    Launch,
    Refused,
    RunSpec,
    StreamParser,
    TaskEvent,
    agent_event,
)
from bloom.worker.agents.claude.adapter import ClaudeCli
from bloom.worker.agents.outcome import Outcome, OutcomeKind, PendingCall, RunReport
from bloom.worker.agents.process import AgentProcess
from bloom.worker.agents.registry import adapters
from bloom.worker.conversations import ConversationBook
from bloom.worker.settings import WorkerSettings
from bloom.worker.task_run import Pause, TaskRun
from tests.support.wire import grant, lease_json


def claude() -> ClaudeCli:
    return ClaudeCli(binary="/bin/claude", extra_args=("--bare",), listed_env=("EXTRA_*",))


def test_the_claude_adapter_builds_todays_command_line(tmp_path: Path) -> None:
    tools = ToolPolicy(allow=("Read",), deny=("Bash(rm:*)",), max_turns=3)
    spec = RunSpec(
        prompt="do it",
        cwd=tmp_path,
        policy=Policy(timeout_sec=42, budget=0.5, tools=tools),
        agent_slug="Plan",
        resume="s-1",
        workspace=True,
    )
    environ = {"PATH": "/usr/bin", "EXTRA_A": "1", "BLOOM_WORKER_API_KEY": "k", "OTHER": "x"}
    launch = claude().invocation(spec, environ)
    assert launch.argv() == [
        "/bin/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--bare",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Read",
        "--disallowedTools",
        "Bash(rm:*)",
        "--max-turns",
        "3",
        "--resume",
        "s-1",
        "--agent",
        "Plan",
        "--max-budget-usd",
        "0.5",
    ]
    assert launch.stdin == "do it"
    assert "do it" not in launch.argv()
    assert (launch.cwd, launch.timeout_sec) == (tmp_path, 42)
    assert launch.env == {"PATH": "/usr/bin", "EXTRA_A": "1", "CLAUDE_PROJECT_ID": "Plan"}


def test_an_unknown_agent_slug_is_no_agent_flag_and_decisions_are_refused(tmp_path: Path) -> None:
    spec = RunSpec(prompt="p", cwd=tmp_path, policy=Policy(), agent_slug="my-project")
    argv = claude().invocation(spec, {}).argv()
    assert "--agent" not in argv
    assert "--resume" not in argv
    assert "--max-budget-usd" not in argv
    deciding = RunSpec(
        prompt="p", cwd=tmp_path, policy=Policy(), resume="s", decisions=(Decision("c1", True),)
    )
    with pytest.raises(Refused, match="decisions"):
        claude().invocation(deciding, {})


def test_the_claude_stream_keeps_todays_events_and_its_result() -> None:
    parser = claude().parser()
    init = {"type": "system", "subtype": "init", "session_id": "s-1", "model": "m"}
    result = {"type": "result", "result": "hi", "session_id": "s-1", "is_error": False}
    assert parser.feed(json.dumps(init)) == [("claude", init)]
    assert parser.final is None
    assert parser.feed("not json at all") == [("stderr", {"line": "not json at all"})]
    assert parser.feed(json.dumps(result)) == [("claude", result)]
    assert parser.final == result


def test_claude_events_map_onto_the_normalised_kinds() -> None:
    adapter = claude()
    assistant = {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}},
            ]
        },
    }
    user = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A"}]},
    }
    result = {
        "type": "result",
        "result": "done",
        "is_error": False,
        "total_cost_usd": 0.01,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    init = {"type": "system", "subtype": "init", "session_id": "s-1", "model": "m"}
    normalised = [
        n for e in (init, assistant, user, result) for n in adapter.normalise("claude", e)
    ]
    assert [n["kind"] for n in normalised] == [
        "session",
        "text",
        "tool_call",
        "tool_result",
        "usage",
        "result",
    ]
    assert normalised[2] == agent_event(
        EventKind.TOOL_CALL, id="t1", name="Read", input={"file_path": "a"}
    )
    assert normalised[3]["output"] == "A"
    assert normalised[3]["is_error"] is False
    assert normalised[4]["cost_usd"] == 0.01
    assert adapter.normalise("stderr", {"line": "x"}) == []


def test_a_lost_session_is_recognised_only_in_a_failed_run() -> None:
    adapter = claude()
    lost = RunReport(exit_code=1, duration_ms=1, stderr_tail="No conversation found with id s")
    assert adapter.session_lost(lost)
    said = {"type": "result", "is_error": True, "result": "No conversation found with id s"}
    assert adapter.session_lost(RunReport(exit_code=1, duration_ms=1, result=said))
    fine = {"type": "result", "is_error": False, "result": "No conversation found, I made one"}
    assert not adapter.session_lost(RunReport(exit_code=0, duration_ms=1, result=fine))
    assert not adapter.session_lost(RunReport(exit_code=1, duration_ms=1, stderr_tail="boom"))


def test_claude_outcome_and_error_classes_go_through_the_adapter() -> None:
    adapter = claude()
    limit = "Claude AI usage limit reached|1750000000"
    assert adapter.classify_error(limit) == (ErrorCode.USAGE_LIMIT, 1_750_000_000_000)
    assert adapter.classify_error("API Error: 529 Overloaded") == (ErrorCode.RATE_LIMITED, None)
    assert adapter.classify_error("Invalid API key")[0] is ErrorCode.AUTH_FAILED
    result = {"type": "result", "is_error": True, "result": limit, "session_id": "s"}
    outcome = adapter.outcome(
        RunReport(exit_code=1, duration_ms=5, result=result), desired_format="text", budget_usd=0
    )
    assert (outcome.kind, outcome.error_code) == (OutcomeKind.FAILED, ErrorCode.USAGE_LIMIT)
    assert outcome.session_id == "s"


def test_an_outcome_paused_on_a_call_is_its_own_kind() -> None:
    pending = PendingCall("c1", "Bash", {"command": "git push"})
    assert Outcome(False, pending=pending).kind is OutcomeKind.PAUSED
    assert Outcome(True).kind is OutcomeKind.SUCCEEDED
    assert Outcome(False).kind is OutcomeKind.FAILED


def test_the_worker_knows_claude_with_its_settings(tmp_path: Path) -> None:
    settings = WorkerSettings(
        name="w1", data_dir=tmp_path, claude_bin="/x/claude", claude_args=["--bare"]
    )
    known = adapters(settings)
    assert list(known) == ["claude", "codex", "gemini"]
    assert isinstance(known["claude"], ClaudeCli)
    assert (known["claude"].binary, known["claude"].extra_args) == ("/x/claude", ("--bare",))


class LineStream:
    """A made-up CLI's stream: each line a text event, `END <answer>` its final record."""

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None

    def feed(self, line: str) -> list[TaskEvent]:
        if line.startswith("END "):
            self.final = {"answer": line[4:]}
            return [(AGENT_EVENT, agent_event(EventKind.RESULT, text=line[4:]))]
        return [(AGENT_EVENT, agent_event(EventKind.TEXT, text=line))]


@dataclass(slots=True)
class LineCli(AgentCli):
    """A second adapter: a shell script as the CLI, its answer after `END `."""

    name: ClassVar[str] = "lines"
    title: ClassVar[str] = "Lines"
    package: ClassVar[str] = "lines"
    pinned_version: ClassVar[str] = "1.0.0"
    script: str = "cat\necho\necho END done"
    pause: bool = False

    @classmethod
    def find(cls, environ: Mapping[str, str]) -> Found | None:
        return None

    @classmethod
    def install(cls, environ: Mapping[str, str], echo: Callable[[str], None]) -> Path:
        raise NotImplementedError

    def detect(self) -> str | None:
        return self.pinned_version

    def environment(self, environ: Mapping[str, str], agent_slug: str) -> dict[str, str]:
        return {"PATH": environ.get("PATH", "/usr/bin:/bin")}

    def invocation(self, spec: RunSpec, environ: Mapping[str, str]) -> Launch:
        if spec.policy.tools is not None and spec.policy.tools.deny:
            raise Refused("the lines CLI has no flag for deny rules")
        return Command(
            binary="/bin/sh",
            args=["-c", self.script],
            cwd=spec.cwd,
            env=self.environment(environ, spec.agent_slug),
            timeout_sec=spec.policy.timeout_sec,
            stdin=spec.prompt,
        )

    def parser(self) -> StreamParser:
        return LineStream()

    def outcome(self, report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
        metrics = {"duration_ms": report.duration_ms}
        if self.pause:
            return Outcome(False, metrics=metrics, pending=PendingCall("c1", "Bash"))
        if report.result is None:
            return Outcome(False, error_code=ErrorCode.CLI_ERROR, metrics=metrics)
        return Outcome(True, output=report.result["answer"], metrics=metrics)

    def classify_error(self, text: str) -> tuple[ErrorCode, int | None]:
        return ErrorCode.CLI_ERROR, None

    def session_lost(self, report: RunReport) -> bool:
        return False

    def credentials_problem(self, env: Mapping[str, str]) -> str | None:
        return None

    def credentials_fingerprint(self, env: Mapping[str, str]) -> str:
        return ""


async def test_the_process_runner_serves_any_adapter(tmp_path: Path) -> None:
    adapter = LineCli(binary="/bin/sh")
    spec = RunSpec(prompt="hello\nworld\n", cwd=tmp_path, policy=Policy(timeout_sec=10))
    seen: list[TaskEvent] = []

    async def sink(kind: str, data: Any) -> None:
        seen.append((kind, data))

    report = await AgentProcess(adapter.invocation(spec, {}), adapter.parser(), sink).run()
    assert report.exit_code == 0
    assert report.result == {"answer": "done"}
    assert [data["text"] for _, data in seen] == ["hello", "world", "done"]
    assert [data["kind"] for _, data in seen] == ["text", "text", "result"]


async def test_the_process_runner_times_out_any_adapter(tmp_path: Path) -> None:
    adapter = LineCli(binary="/bin/sh", script="cat >/dev/null; sleep 30 & sleep 30")
    spec = RunSpec(prompt="p", cwd=tmp_path, policy=Policy(timeout_sec=1))

    async def sink(kind: str, data: Any) -> None:
        pass

    report = await AgentProcess(adapter.invocation(spec, {}), adapter.parser(), sink).run()
    assert report.timed_out
    assert report.timeout_sec == 1
    assert report.result is None


async def run_task(tmp_path: Path, agent: AgentCli, **policy: Any) -> dict[str, Any]:
    completes: list[dict[str, Any]] = []

    async def runtime(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/heartbeat"):
            return httpx.Response(200, json={"lease": lease_json(), "expires_at": 301_000})
        if request.url.path.endswith("/complete"):
            completes.append(json.loads(request.content))
        return httpx.Response(200, json={})

    settings = WorkerSettings(name="w1", data_dir=tmp_path)
    book = ConversationBook(tmp_path / "s.json")
    task = grant(policy=policy) if policy else grant()
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        await TaskRun(settings, client, book, Pause(), task, agent=agent).run()
    (body,) = completes
    return body


async def test_a_task_runs_through_another_adapter(tmp_path: Path) -> None:
    body = await run_task(tmp_path, LineCli(binary="/bin/sh"))
    assert body["status"] == "success"
    assert body["output"] == "done"
    types = [event["type"] for event in body["events"]]
    assert types[0] == "started"
    assert types[-1] == "finished"
    assert set(types[1:-1]) == {AGENT_EVENT}


async def test_what_the_cli_cannot_do_fails_the_task_with_the_reason(tmp_path: Path) -> None:
    body = await run_task(
        tmp_path, LineCli(binary="/bin/sh"), tools={"deny": ["Bash"]}, timeout_sec=30
    )
    assert body["status"] == "error"
    assert body["error_code"] == "fatal"
    assert body["error_message"] == "the lines CLI has no flag for deny rules"


async def test_a_pause_is_reported_as_a_call_waiting_for_a_person(tmp_path: Path) -> None:
    body = await run_task(tmp_path, LineCli(binary="/bin/sh", pause=True))
    assert body["status"] == "error"
    assert body["error_code"] == "approval_required"
    assert "decision on Bash" in body["error_message"]
    assert (body["approval"]["tool_use_id"], body["approval"]["tool_name"]) == ("c1", "Bash")


async def test_a_task_for_a_cli_this_worker_lacks_is_given_back_unrun(tmp_path: Path) -> None:
    completes: list[dict[str, Any]] = []

    async def runtime(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/heartbeat"):
            return httpx.Response(200, json={"lease": lease_json(), "expires_at": 301_000})
        if request.url.path.endswith("/complete"):
            completes.append(json.loads(request.content))
        return httpx.Response(200, json={})

    settings = WorkerSettings(name="w1", data_dir=tmp_path, claude_bin="/nonexistent/claude")
    book = ConversationBook(tmp_path / "s.json")
    async with RuntimeClient("http://runtime", transport=httpx.MockTransport(runtime)) as client:
        await TaskRun(settings, client, book, Pause(), grant(cli="aider")).run()
    (body,) = completes
    assert body["status"] == "error"
    assert body["error_code"] == "error"  # retried, by a worker that has it
    assert body["error_message"] == "This worker has no aider CLI"
    assert [event["type"] for event in body["events"]] == ["finished"]


async def test_the_worker_registers_the_clis_it_has(tmp_path: Path) -> None:
    claude_bin = tmp_path / "claude"
    claude_bin.write_text("#!/bin/sh\nexit 0\n")  # a stand-in: no version to read
    claude_bin.chmod(0o755)
    settings = WorkerSettings(
        name="w1",
        data_dir=tmp_path,
        claude_bin=str(claude_bin),
        codex_bin="/nonexistent/codex",
        gemini_bin="/nonexistent/gemini",
    )
    async with RuntimeClient("http://runtime") as client:
        worker = Worker(settings, client, environ={"PATH": "/usr/bin:/bin"})
        await worker.detect_clis()
    assert worker.registration()["capabilities"]["clis"] == {"claude": "unknown"}
    assert "clis" not in worker.registration(readiness=False)["capabilities"]
