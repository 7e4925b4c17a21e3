"""The Codex adapter, on output recorded from the real CLI (`@openai/codex` 0.171.0 run
against the echo model: tests/unit/data/codex-0.171.0-*.jsonl); the real CLI end to end is
tests/process/test_codex_e2e.py."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bloom.clients.wire import Policy
from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agents import prices
from bloom.worker.agents.base import Decision, Refused, RunSpec, TaskEvent
from bloom.worker.agents.codex import config
from bloom.worker.agents.codex.adapter import CodexCli, sandbox_args
from bloom.worker.agents.codex.env import child_environment
from bloom.worker.agents.codex.outcome import classify_error, reset_time
from bloom.worker.agents.codex.stream import CodexStream
from bloom.worker.agents.outcome import RunReport
from bloom.worker.echo_model import create_app

DATA = Path(__file__).parent / "data"


def run(name: str, model: str | None = "gpt-5.1-codex") -> tuple[list[TaskEvent], CodexStream]:
    parser = CodexStream(model)
    events: list[TaskEvent] = []
    for line in (DATA / f"codex-0.171.0-{name}.jsonl").read_text().splitlines():
        events += parser.feed(line)
    return events, parser


def report(parser: CodexStream, exit_code: int = 0, **more: object) -> RunReport:
    return RunReport(exit_code=exit_code, duration_ms=5, result=parser.final, **more)  # type: ignore[arg-type]


def cli(tmp_path: Path, *args: str) -> CodexCli:
    binary = tmp_path / "codex"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return CodexCli(binary=str(binary), extra_args=args)


def test_an_answer_becomes_normalised_events_and_a_success(tmp_path: Path) -> None:
    events, parser = run("answer")
    assert {kind for kind, _ in events} == {"agent"}
    kinds = [data["kind"] for _, data in events]
    assert kinds == ["session", "error", "text", "usage", "result"]  # the error: a warning
    assert events[2][1]["text"] == "echo: hello there"
    usage = events[3][1]
    assert (usage["input_tokens"], usage["output_tokens"]) == (5405, 4)
    assert usage["cost_usd"] == pytest.approx((5405 * 1.25 + 4 * 10.0) / 1e6)
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0)
    assert outcome.success
    assert outcome.output == "echo: hello there"
    assert outcome.session_id == "01a21d38-ac12-74c1-94ff-322cd2e8b68c"
    assert outcome.metrics["tokens_used"] == 5409
    assert outcome.metrics["model"] == "gpt-5.1-codex"
    assert outcome.metrics["cost_usd"] == pytest.approx(usage["cost_usd"])


def test_a_model_the_price_table_lacks_has_tokens_and_no_cost(tmp_path: Path) -> None:
    _, parser = run("answer", model="someone-elses-model")
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0.01)
    assert outcome.success
    assert "cost_usd" not in outcome.metrics
    assert outcome.metrics["tokens_used"] == 5409


def test_over_budget_fails_after_the_run(tmp_path: Path) -> None:
    _, parser = run("answer")
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0.001)
    assert outcome.error_code is ErrorCode.BUDGET_EXCEEDED
    assert str(outcome.error_message).startswith("Budget exceeded: spent $0.0068 of $0.001")


def test_a_tool_call_and_its_result(tmp_path: Path) -> None:
    events, parser = run("tool")
    data = [event for _, event in events]
    call = next(e for e in data if e["kind"] == "tool_call")
    result = next(e for e in data if e["kind"] == "tool_result")
    assert (call["name"], call["input"]) == ("shell", {"command": "/bin/bash -lc 'echo made'"})
    assert result["id"] == call["id"]
    assert "made" in result["output"]
    assert result["is_error"] is False
    assert len([e for e in data if e["kind"] == "tool_call"]) == 1  # started, then completed
    outcome = cli(tmp_path).outcome(report(parser), desired_format="text", budget_usd=0)
    assert outcome.success


def test_a_usage_limit_is_parked_until_the_time_it_says(tmp_path: Path) -> None:
    events, parser = run("usage-limit")
    assert [data["kind"] for _, data in events][-2:] == ["error", "result"]
    outcome = cli(tmp_path).outcome(
        report(parser, exit_code=1), desired_format="text", budget_usd=0
    )
    assert outcome.error_code is ErrorCode.USAGE_LIMIT
    assert outcome.retry_at is not None
    assert "usage limit" in str(outcome.error_message)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (
            "unexpected status 401 Unauthorized: Incorrect API key provided: k.",
            ErrorCode.AUTH_FAILED,
        ),
        ("Missing environment variable: `OPENAI_API_KEY`.", ErrorCode.AUTH_FAILED),
        (
            "Your access token could not be refreshed because your refresh token was already "
            "used. Please log out and sign in again.",
            ErrorCode.AUTH_FAILED,
        ),
        ("Quota exceeded. Check your plan and billing details.", ErrorCode.USAGE_LIMIT),
        ("exceeded retry limit, last status: 429 Too Many Requests", ErrorCode.RATE_LIMITED),
        (
            "We\u2019re currently experiencing high demand, which may cause temporary errors.",
            ErrorCode.RATE_LIMITED,
        ),
        ("something else broke", ErrorCode.CLI_ERROR),
    ],
)
def test_errors_the_cli_reports_are_classified(text: str, code: ErrorCode) -> None:
    assert classify_error(text)[0] is code


def test_the_reset_time_of_a_usage_limit() -> None:
    now = datetime(2026, 7, 1, 15, 0, tzinfo=UTC)
    later = "You\u2019ve hit your usage limit. \u2026 or try again at 4:05 PM."
    assert reset_time(later, now) == int(datetime(2026, 7, 1, 16, 5, tzinfo=UTC).timestamp() * 1000)
    tomorrow = "\u2026 try again at 2:36 AM."
    assert reset_time(tomorrow, now) == int(
        datetime(2026, 7, 2, 2, 36, tzinfo=UTC).timestamp() * 1000
    )
    dated = "\u2026 try again at Jul 9th, 2026 1:47 AM."
    assert reset_time(dated, now) == int(datetime(2026, 7, 9, 1, 47, tzinfo=UTC).timestamp() * 1000)
    assert reset_time("Quota exceeded.", now) is None


def test_a_lost_session_is_run_afresh(tmp_path: Path) -> None:
    lost = RunReport(
        exit_code=1,
        duration_ms=1,
        stderr_tail="Error: thread/resume: thread/resume failed: no rollout found for thread id "
        "01a21d38-4ab5-7173-8057-045ea50c7099 (code -32600)",
    )
    assert cli(tmp_path).session_lost(lost)
    _, parser = run("answer")
    assert not cli(tmp_path).session_lost(report(parser))


def spec(tmp_path: Path, **more: object) -> RunSpec:
    return RunSpec(prompt="do it", cwd=tmp_path, policy=Policy(timeout_sec=30), **more)  # type: ignore[arg-type]


def test_the_command_line_new_and_resumed(tmp_path: Path) -> None:
    adapter = cli(tmp_path, "-c", 'model="gpt-5.1-codex"')
    launch = adapter.invocation(spec(tmp_path), {"PATH": "/bin", "BLOOM_API_KEY": "secret"})
    assert launch.argv()[1:] == [
        "exec", "--json", "--skip-git-repo-check", "--cd", str(tmp_path),
        "-c", 'model="gpt-5.1-codex"', "-c", 'sandbox_mode="read-only"', "-",
    ]  # fmt: skip
    assert launch.stdin == "do it"
    assert "do it" not in launch.argv()
    assert launch.env == {"PATH": "/bin"}
    resumed = adapter.invocation(spec(tmp_path, resume="t-1", workspace=True), {})
    assert resumed.argv()[-5:] == ["-c", 'sandbox_mode="workspace-write"', "resume", "t-1", "-"]


def test_the_sandbox_follows_the_task_mode_then_the_fleet() -> None:
    fleet = ["--sandbox", "danger-full-access", "-c", "x=1"]
    assert sandbox_args(fleet, None, workspace=False) == fleet
    plan = ToolPolicy(mode="plan")
    assert sandbox_args(fleet, plan, workspace=True) == [
        "-c",
        "x=1",
        "-c",
        'sandbox_mode="read-only"',
    ]
    bypass = ToolPolicy(mode="bypassPermissions")
    assert sandbox_args([], bypass, workspace=False) == [
        "--dangerously-bypass-approvals-and-sandbox"
    ]
    edits = ToolPolicy(mode="acceptEdits")
    assert sandbox_args([], edits, workspace=False) == ["-c", 'sandbox_mode="workspace-write"']


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        (ToolPolicy(ask=("Bash",)), "policy.tools.ask"),
        (ToolPolicy(allow=("Read",)), "no per-tool allow or deny rules"),
        (ToolPolicy(deny=("Bash(rm:*)",)), "no per-tool allow or deny rules"),
        (ToolPolicy(max_turns=3), "policy.tools.max_turns"),
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


def test_its_environment_is_an_allow_list() -> None:
    env = child_environment(
        {"PATH": "/bin", "OPENAI_API_KEY": "k", "CODEX_HOME": "/h", "ANTHROPIC_API_KEY": "a",
         "BLOOM_API_KEY": "s", "ECHO_KEY": "e"},
        ["ECHO_KEY", "BLOOM_*"],
    )  # fmt: skip
    assert env == {"PATH": "/bin", "OPENAI_API_KEY": "k", "CODEX_HOME": "/h", "ECHO_KEY": "e"}


def test_credentials_from_a_key_a_login_or_a_provider(tmp_path: Path) -> None:
    home = {"CODEX_HOME": str(tmp_path)}
    assert config.credentials_problem((), home) == config.NO_CREDENTIALS
    assert config.credentials_problem((), home | {"OPENAI_API_KEY": "k"}) is None
    assert config.credentials_problem(("-c", 'model_provider="echo"'), home) is None
    before = config.fingerprint((), home)
    (tmp_path / "auth.json").write_text("{}")
    assert config.credentials_problem((), home) is None
    assert config.fingerprint((), home) != before
    (tmp_path / "config.toml").write_text('model = "gpt-5.4"\n')
    assert config.setting("model", (), home) == "gpt-5.4"
    assert config.setting("model", ("-m", "o3"), home) == "o3"


def test_prices_by_model_and_prefix() -> None:
    assert prices.price_of("gpt-5.1-codex-max") == prices.PRICES["gpt-5.1-codex"]
    assert prices.price_of("gpt-5") == prices.PRICES["gpt-5"]
    assert prices.price_of("unknown") is None
    assert prices.cost_usd("gpt-5", 1_000_000, 1_000_000, 0) == pytest.approx(0.125)


def test_the_echo_model_speaks_the_responses_api() -> None:
    client = TestClient(create_app())
    body = {
        "model": "gpt-echo",
        "input": [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "<environment_context>…"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
    }  # fmt: skip
    plain = client.post("/v1/responses", json=body).json()
    assert plain["output"][0]["content"][0]["text"] == "echo: hi"
    assert plain["usage"]["output_tokens"] > 0
    streamed = client.post("/v1/responses", json=body | {"stream": True}).text
    assert "event: response.output_text.delta" in streamed
    assert streamed.rstrip().splitlines()[-2] == "event: response.completed"
