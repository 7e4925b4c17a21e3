"""The Gemini CLI adapter, read against lines the real CLI (0.61.0) printed against the echo
model (and a stand-in API for its authentication and overload errors); end to end in
tests/process/test_gemini_e2e.py."""

import json
import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bloom.clients.wire import Policy
from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agents import prices
from bloom.worker.agents.base import Decision, Refused, RunSpec, TaskEvent
from bloom.worker.agents.gemini import config
from bloom.worker.agents.gemini.adapter import GeminiCli, allowed_tool, approval_args
from bloom.worker.agents.gemini.env import SYSTEM_DEFAULTS, child_environment
from bloom.worker.agents.gemini.outcome import classify_error
from bloom.worker.agents.gemini.stream import GeminiStream
from bloom.worker.agents.outcome import RunReport
from bloom.worker.echo_model import create_app

DATA = Path(__file__).parent / "data"
NOW = 1_800_000_000.0


def run(name: str) -> tuple[list[TaskEvent], GeminiStream]:
    parser = GeminiStream()
    events: list[TaskEvent] = []
    for line in (DATA / f"gemini-0.61.0-{name}.jsonl").read_text().splitlines():
        events += parser.feed(line)
    return events, parser


def report(parser: GeminiStream, exit_code: int = 0, **more: object) -> RunReport:
    return RunReport(exit_code=exit_code, duration_ms=5, result=parser.final, **more)  # type: ignore[arg-type]


def cli(tmp_path: Path, *args: str) -> GeminiCli:
    binary = tmp_path / "gemini"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return GeminiCli(binary=str(binary), extra_args=args)


def test_an_answer_becomes_normalised_events_and_a_success(tmp_path: Path) -> None:
    events, parser = run("answer")
    assert {kind for kind, _ in events} == {"agent"}
    assert [data["kind"] for _, data in events] == ["session", "text", "usage", "result"]
    session, text, usage, result = (data for _, data in events)
    assert (session["session_id"], session["model"]) == (
        "a99b88c0-5b4a-4c71-8bc6-67fdbffb71ac",
        "gemini-2.5-flash",
    )
    assert text["text"] == result["text"] == "echo: hello there"
    assert (usage["input_tokens"], usage["output_tokens"]) == (129, 4)
    assert usage["cost_usd"] == pytest.approx((129 * 0.30 + 4 * 2.50) / 1e6)
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0)
    assert outcome.success
    assert outcome.output == "echo: hello there"
    assert outcome.session_id == session["session_id"]
    assert outcome.metrics["tokens_used"] == 133
    assert outcome.metrics["model"] == "gemini-2.5-flash"
    assert outcome.metrics["cost_usd"] == pytest.approx(usage["cost_usd"])


def test_a_routed_run_counts_every_model_and_names_the_one_that_answered(tmp_path: Path) -> None:
    events, parser = run("auto")
    assert events[0][1]["model"] is None  # `init` says "auto": the CLI picks one per turn
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0.0001)
    assert outcome.success  # no model it used is priced: no cost, no budget check
    assert outcome.output == "echo: hello auto"
    assert outcome.metrics["tokens_used"] == 265 + 8
    assert outcome.metrics["model"] == "gemini-3.8-flash"  # the router's is listed first
    assert "cost_usd" not in outcome.metrics


def test_over_budget_fails_after_the_run(tmp_path: Path) -> None:
    _, parser = run("answer")
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0.00001)
    assert outcome.error_code is ErrorCode.BUDGET_EXCEEDED
    assert "the Gemini CLI has no budget of its own" in str(outcome.error_message)


def test_a_tool_call_and_its_result(tmp_path: Path) -> None:
    events, parser = run("tool")
    data = [event for _, event in events]
    assert [e["kind"] for e in data] == [
        "session", "tool_call", "tool_result", "text", "usage", "result",
    ]  # fmt: skip
    call, result = data[1], data[2]
    assert (call["name"], call["input"]) == ("run_shell_command", {"command": "echo made"})
    assert (result["id"], result["output"], result["is_error"]) == (call["id"], "made", False)
    assert "Output: made" in data[3]["text"]  # the deltas after the call, as one text
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0)
    assert outcome.success
    assert outcome.output == data[3]["text"]


def test_a_spent_quota_is_parked_until_the_delay_the_api_gave(tmp_path: Path) -> None:
    events, parser = run("usage-limit")
    assert [data["kind"] for _, data in events] == ["session", "result"]
    outcome = cli(tmp_path).outcome(
        report(parser, exit_code=1), desired_format="text", budget_usd=0
    )
    assert outcome.error_code is ErrorCode.USAGE_LIMIT
    assert "exceeded your current quota" in str(outcome.error_message)
    said = str((parser.final or {})["errors"][-1])
    code, retry_at = classify_error(said, now=lambda: NOW)
    assert code is ErrorCode.USAGE_LIMIT
    delay = int(said.split("Please retry in ")[1].split("s.")[0])
    assert retry_at == int((NOW + delay) * 1000)


def test_a_key_the_api_refuses_is_an_authentication_failure(tmp_path: Path) -> None:
    _, parser = run("auth")
    outcome = cli(tmp_path).outcome(
        report(parser, exit_code=1), desired_format="text", budget_usd=0
    )
    assert outcome.error_code is ErrorCode.AUTH_FAILED
    assert str(outcome.error_message).startswith("The Gemini CLI could not authenticate")
    assert "API key not valid" in str(outcome.error_message)


def test_an_overloaded_model_after_the_cli_s_retries_is_rate_limited(tmp_path: Path) -> None:
    _, parser = run("overloaded")
    outcome = cli(tmp_path).outcome(
        report(parser, exit_code=1), desired_format="text", budget_usd=0
    )
    assert (outcome.error_code, outcome.retry_at) == (ErrorCode.RATE_LIMITED, None)


@pytest.mark.parametrize(
    ("text", "code", "delay"),
    [
        ('[API Error: {"error":{"code":403,"status":"PERMISSION_DENIED"}}]', "auth_failed", None),
        (
            "When using Gemini API, you must specify the GEMINI_API_KEY environment variable.",
            "auth_failed",
            None,
        ),
        ("You have exhausted your daily quota on this model.", "usage_limit", None),
        (
            "[API Error: Resource has been exhausted\nSuggested retry after 30s.]",
            "rate_limited",
            30,
        ),
        ('{"code":429,"details":[{"retryDelay": "1500ms"}]}', "rate_limited", 1.5),
        ("something else broke", "cli_error", None),
    ],
)
def test_errors_the_cli_reports_are_classified(text: str, code: str, delay: float | None) -> None:
    found, retry_at = classify_error(text, now=lambda: NOW)
    assert str(found) == code
    assert retry_at == (None if delay is None else int((NOW + delay) * 1000))


def test_a_lost_session_is_run_afresh(tmp_path: Path) -> None:
    lost = RunReport(
        exit_code=42,
        duration_ms=1,
        stderr_tail='Error resuming session: Invalid session identifier "0b0b0b0b-0000-0000-'
        '0000-000000000000".\n  Searched for sessions in /h/.gemini/tmp/run/chats.',
    )
    assert cli(tmp_path).session_lost(lost)
    _, parser = run("answer")
    assert not cli(tmp_path).session_lost(report(parser))


def spec(tmp_path: Path, **more: object) -> RunSpec:
    return RunSpec(prompt="do it", cwd=tmp_path, policy=Policy(timeout_sec=30), **more)  # type: ignore[arg-type]


def test_the_command_line_and_its_environment(tmp_path: Path) -> None:
    adapter = cli(tmp_path, "--model", "gemini-2.5-pro")
    environ = {
        "PATH": "/bin", "HOME": "/h", "BLOOM_API_KEY": "secret", "ANTHROPIC_API_KEY": "a",
        "GEMINI_API_KEY": "k", "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1",
    }  # fmt: skip
    launch = adapter.invocation(spec(tmp_path), environ)
    assert launch.argv()[1:] == [
        "--output-format", "stream-json", "--skip-trust",
        "--model", "gemini-2.5-pro", "--approval-mode", "default",
    ]  # fmt: skip
    assert launch.stdin == "do it"
    assert "do it" not in launch.argv()
    assert launch.env == {
        "PATH": "/bin", "HOME": "/h", "GEMINI_API_KEY": "k",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1",
        "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": str(SYSTEM_DEFAULTS),
        "GEMINI_CLI_BLOOM_AUTH_TYPE": "gemini-api-key",
    }  # fmt: skip
    workspace = adapter.invocation(spec(tmp_path, workspace=True), {})
    assert workspace.argv()[-2:] == ["--approval-mode", "auto_edit"]


def test_its_offline_defaults_are_what_the_cli_reads() -> None:
    defaults = json.loads(SYSTEM_DEFAULTS.read_text())
    assert defaults["privacy"]["usageStatisticsEnabled"] is False
    assert defaults["telemetry"]["enabled"] is False
    assert defaults["general"]["enableAutoUpdate"] is False
    assert defaults["ide"]["enabled"] is False
    assert os.stat(SYSTEM_DEFAULTS).st_mode & 0o022 == 0  # the CLI skips a writable file's


def test_its_environment_keeps_vertex_and_the_operator_s_choices() -> None:
    vertex = child_environment(
        {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "p",
         "GOOGLE_CLOUD_LOCATION": "us", "GOOGLE_GEMINI_BASE_URL": "http://x",
         "GEMINI_API_KEY": "k", "GOOGLE_OTHER": "no", "ECHO_KEY": "e", "BLOOM_X": "s"},
        ["ECHO_KEY", "BLOOM_*"],
    )  # fmt: skip
    assert "GEMINI_CLI_BLOOM_AUTH_TYPE" not in vertex  # the CLI's own choice: Vertex AI
    assert "GOOGLE_OTHER" not in vertex
    assert "BLOOM_X" not in vertex
    assert vertex["ECHO_KEY"] == "e"
    own = child_environment({"GEMINI_CLI_SYSTEM_DEFAULTS_PATH": "/etc/mine.json"})
    assert own["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"] == "/etc/mine.json"


def test_the_approval_mode_follows_the_task_then_the_fleet() -> None:
    fleet = ["--approval-mode", "yolo", "--model", "m"]
    assert approval_args(fleet, None, workspace=False) == fleet
    assert approval_args(["-y"], ToolPolicy(mode="plan"), workspace=True) == [
        "--approval-mode",
        "plan",
    ]
    edits = approval_args(fleet, ToolPolicy(mode="acceptEdits"), workspace=False)
    assert edits == ["--model", "m", "--approval-mode", "auto_edit"]
    bypass = approval_args([], ToolPolicy(mode="bypassPermissions"), workspace=False)
    assert bypass == ["--approval-mode", "yolo"]
    allowed = approval_args([], ToolPolicy(allow=("Bash(git log:*)", "Read")), workspace=False)
    assert allowed[-2:] == ["--allowed-tools", "run_shell_command(git log),read_file"]


@pytest.mark.parametrize(
    ("rule", "flag"),
    [
        ("Bash", "run_shell_command"),
        ("Bash(npm run *)", "run_shell_command(npm run)"),
        ("Edit", "replace"),
        ("web_fetch", "web_fetch"),
    ],
)
def test_allow_rules_in_the_cli_s_tool_names(rule: str, flag: str) -> None:
    assert allowed_tool(rule) == flag


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        (ToolPolicy(ask=("Bash",)), "policy.tools.ask"),
        (ToolPolicy(deny=("Bash(rm:*)",)), "no flag for deny rules"),
        (ToolPolicy(max_turns=3), "policy.tools.max_turns"),
        (ToolPolicy(allow=("Edit(src/**)",)), "cannot narrow the allow rule"),
        (ToolPolicy(allow=("Bash(git push)",)), "cannot narrow the allow rule"),
        (ToolPolicy(allow=("mcp__db__query",)), "no tool for the allow rule"),
    ],
)
def test_what_the_cli_cannot_express_is_refused(
    tmp_path: Path, tools: ToolPolicy, said: str
) -> None:
    task = RunSpec(prompt="p", cwd=tmp_path, policy=Policy(tools=tools))
    with pytest.raises(Refused, match=said.replace(".", r"\.")):
        cli(tmp_path).invocation(task, {})


def test_decisions_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused):
        cli(tmp_path).invocation(spec(tmp_path, decisions=(Decision("c1", True),)), {})


def test_a_session_is_resumed_in_its_project_and_imported_into_another(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    first, other = tmp_path / "task-1", tmp_path / "task-2"
    first.mkdir()
    other.mkdir()
    session = "c4207842-fc84-4507-bfa3-05b26984f09a"
    chats = tmp_path / ".gemini" / "tmp" / "task-1" / "chats"
    chats.mkdir(parents=True)
    kept = chats / f"session-2026-11-27T16-26-{session[:8]}.jsonl"
    head = {"sessionId": session, "projectHash": config.project_hash(first), "kind": "main"}
    kept.write_text(json.dumps(head) + "\n")
    adapter = cli(tmp_path)
    same = adapter.invocation(spec(first, resume=session), home)
    assert same.argv()[-2:] == ["--resume", session]
    moved = adapter.invocation(spec(other, resume=session), home)
    assert moved.argv()[-2:] == ["--session-file", str(kept)]
    gone = adapter.invocation(spec(other, resume="0b0b0b0b-0000-0000-0000-000000000000"), home)
    assert gone.argv()[-1] == "0b0b0b0b-0000-0000-0000-000000000000"  # the CLI says it is gone


def test_credentials_from_a_key_vertex_or_a_login(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert config.credentials_problem(home) == config.NO_CREDENTIALS
    assert config.credentials_problem(home | {"GEMINI_API_KEY": "k"}) is None
    vertex = {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "p"}
    assert config.credentials_problem(home | vertex) == config.NO_CREDENTIALS
    assert config.credentials_problem(home | vertex | {"GOOGLE_CLOUD_LOCATION": "us"}) is None
    before = config.fingerprint(home)
    (tmp_path / ".gemini").mkdir()
    (tmp_path / ".gemini" / "oauth_creds.json").write_text("{}")
    assert config.credentials_problem(home) is None
    assert config.fingerprint(home) != before


def test_gemini_prices_share_the_one_table() -> None:
    assert prices.price_of("gemini-2.5-flash-preview-09-2025") == prices.PRICES["gemini-2.5-flash"]
    assert prices.price_of("gemini-2.5-flash-lite") == prices.PRICES["gemini-2.5-flash-lite"]
    assert prices.cost_usd("gemini-2.5-pro", 1_000_000, 0, 1_000_000) == pytest.approx(11.25)


def test_the_echo_model_speaks_the_gemini_api() -> None:
    client = TestClient(create_app())
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "<session_context>…"}, {"text": "hi"}]},
        ]
    }
    plain = client.post("/v1beta/models/gemini-x:generateContent", json=body).json()
    assert plain["candidates"][0]["content"]["parts"] == [{"text": "echo: hi"}]
    assert plain["usageMetadata"]["candidatesTokenCount"] > 0
    streamed = client.post(
        "/v1beta/models/gemini-x:streamGenerateContent", params={"alt": "sse"}, json=body
    ).text
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: ")]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert client.post("/v1beta/models/gemini-x:countTokens", json=body).json()["totalTokens"] > 0
    wanted = {"responseMimeType": "application/json", "responseJsonSchema": {
        "type": "OBJECT", "required": ["score", "why"],
        "properties": {"score": {"type": "INTEGER"}, "why": {"type": "STRING"}},
    }}  # fmt: skip
    routed = client.post(
        "/v1beta/models/gemini-x:generateContent", json=body | {"generationConfig": wanted}
    ).json()
    answer = json.loads(routed["candidates"][0]["content"]["parts"][0]["text"])
    assert answer == {"score": 1, "why": "echo: hi"}


def test_the_echo_model_scripts_calls_and_knows_their_results_by_id() -> None:
    client = TestClient(create_app())
    prompt = '[[tool run_shell_command {"command": "echo a"}]]'
    asked: dict[str, object] = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
    first = client.post("/v1beta/models/m:generateContent", json=asked).json()
    (part,) = first["candidates"][0]["content"]["parts"]
    call = part["functionCall"]
    assert (call["name"], call["args"]) == ("run_shell_command", {"command": "echo a"})
    answered = {
        "contents": [
            {"role": "user", "parts": [{"text": prompt}]},
            {"role": "model", "parts": [part]},
            {"role": "user", "parts": [{"functionResponse": {
                "id": call["id"], "name": call["name"], "response": {"output": "a"}}}]},
        ]
    }  # fmt: skip
    done = client.post("/v1beta/models/m:generateContent", json=answered).json()
    assert done["candidates"][0]["content"]["parts"] == [{"text": "echo: a"}]


def test_the_echo_model_s_quota_and_overload_errors_are_the_api_s() -> None:
    client = TestClient(create_app())
    reset = int(NOW * 2)
    limited = {"contents": [{"role": "user", "parts": [{"text": f"[[usage-limit {reset}]]"}]}]}
    answer = client.post("/v1beta/models/m:generateContent", json=limited)
    assert answer.status_code == 429
    error = answer.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert {detail["@type"].rsplit(".", 1)[-1] for detail in error["details"]} == {
        "QuotaFailure",
        "RetryInfo",
    }
    busy = {"contents": [{"role": "user", "parts": [{"text": "[[overloaded]]"}]}]}
    assert client.post("/v1beta/models/m:generateContent", json=busy).status_code == 503


def test_its_version_is_read_from_its_package_not_by_running_it(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@google" / "gemini-cli"
    (package / "bundle").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@google/gemini-cli", "version": "0.61.0"}')
    script = package / "bundle" / "gemini.js"
    script.write_text("#!/bin/sh\necho 9.9.9\n")  # what running it would say
    script.chmod(0o755)
    launcher = tmp_path / "node_modules" / ".bin" / "gemini"
    launcher.parent.mkdir()
    launcher.symlink_to("../@google/gemini-cli/bundle/gemini.js")
    assert GeminiCli(binary=str(launcher)).detect() == "0.61.0"
    script.unlink()
    other = tmp_path / "gemini"
    other.write_text("#!/bin/sh\necho 0.60.1\n")  # no package beside it: asked
    other.chmod(0o755)
    assert GeminiCli(binary=str(other)).detect() == "0.60.1"
