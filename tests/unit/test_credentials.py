"""The Claude CLI's credentials found without calling a model, and an authentication failure
classified as not worth retrying."""

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bloom.clients.wire import WorkerInfo
from bloom.domain.retry import ErrorCode, RetryPolicy, failure_outcome
from bloom.domain.routing import WorkerLoad, pick_worker
from bloom.domain.states import TaskStatus
from bloom.web.settings import SettingsError
from bloom.worker.agent import Worker
from bloom.worker.agents.claude.credentials import (
    NO_CREDENTIALS,
    CredentialFacts,
    auth_failure_message,
    fingerprint,
    missing_credentials,
    probe,
)
from bloom.worker.agents.claude.outcome import decide
from bloom.worker.agents.outcome import RunReport
from bloom.worker.settings import WorkerSettings, load_worker_settings
from tests.support.worker import claude_binary


@pytest.mark.parametrize(
    "facts",
    [
        CredentialFacts(env={"ANTHROPIC_API_KEY": "sk-1"}),
        CredentialFacts(env={"CLAUDE_CODE_OAUTH_TOKEN": "t"}),
        CredentialFacts(env={"CLAUDE_CODE_USE_BEDROCK": "1"}),
        CredentialFacts(env={}, login_file=True),
        CredentialFacts(env={}, api_key_helper=True),
        CredentialFacts(env={}, cli_logged_in=True),
    ],
)
def test_any_credential_makes_the_cli_ready(facts: CredentialFacts) -> None:
    assert missing_credentials(facts) is None


@pytest.mark.parametrize(
    "facts",
    [
        CredentialFacts(env={"ANTHROPIC_API_KEY": " ", "CLAUDE_CODE_USE_VERTEX": "0"}),
        CredentialFacts(env={}, cli_logged_in=False),
        CredentialFacts(env={}),
    ],
)
def test_without_credentials_the_reason_says_what_to_do(facts: CredentialFacts) -> None:
    reason = missing_credentials(facts)
    assert reason == NO_CREDENTIALS
    assert "ANTHROPIC_API_KEY" in reason
    assert "`claude`" in reason
    assert "make demo" in reason


def test_the_real_cli_with_an_empty_home_has_no_credentials(tmp_path: Path) -> None:
    claude = claude_binary()
    if claude is None:
        pytest.skip("no Claude CLI")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    assert probe(str(claude), env) == NO_CREDENTIALS
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(json.dumps({"apiKeyHelper": "echo sk-from-helper"}))
    assert probe(str(claude), env) is None


def test_a_login_file_is_found_without_asking_the_cli(tmp_path: Path) -> None:
    (tmp_path / ".credentials.json").write_text("{}")
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path)}
    assert probe(str(tmp_path / "no-such-claude"), env) is None
    assert probe(str(tmp_path / "no-such-claude"), {"HOME": str(tmp_path)}) == NO_CREDENTIALS


@pytest.mark.parametrize(
    "said",
    [
        "Not logged in · Please run /login",
        "Invalid API key · Please run /login",
        'API Error: 401 {"type":"error","error":{"type":"authentication_error"}}',
    ],
)
def test_an_authentication_failure_fails_the_task_at_once(said: str) -> None:
    report = RunReport(exit_code=1, duration_ms=150, result={"is_error": True, "result": said})
    outcome = decide(report, desired_format="text", budget_usd=0)
    assert outcome.error_code is ErrorCode.AUTH_FAILED
    assert outcome.error_message is not None
    assert "ANTHROPIC_API_KEY" in outcome.error_message
    assert "/login" not in outcome.error_message
    next_state = failure_outcome(
        ErrorCode.AUTH_FAILED,
        attempts=1,
        max_attempts=3,
        now=0,
        retry_at=None,
        cancel_requested=False,
        policy=RetryPolicy(),
    )
    assert next_state.status is TaskStatus.FAILED


def test_an_authentication_failure_on_stderr_is_recognised_too() -> None:
    report = RunReport(exit_code=1, duration_ms=5, stderr_tail="Error: Invalid API key")
    outcome = decide(report, desired_format="text", budget_usd=0)
    assert outcome.error_code is ErrorCode.AUTH_FAILED
    assert outcome.error_message == auth_failure_message("Error: Invalid API key")


def test_a_not_ready_worker_is_never_picked() -> None:
    def load(worker_id: str, ready: bool) -> WorkerLoad:
        return WorkerLoad(worker_id, "online", True, 4, 0, 1, ready=ready)

    assert pick_worker([load("a", False), load("b", True)], "a", now=0) == load("b", True)
    assert pick_worker([load("a", False)], None, now=0) is None


def test_worker_info_reads_readiness() -> None:
    base = {"id": "w", "status": "online", "last_heartbeat": None}
    ready = WorkerInfo.from_json(base | {"capabilities": {"max_concurrency": 1}})
    assert ready.not_ready is None
    caps = {"ready": False, "not_ready": "no key"}
    assert WorkerInfo.from_json(base | {"capabilities": caps}).not_ready == "no key"
    bare = WorkerInfo.from_json(base | {"capabilities": {"ready": False}})
    assert bare.not_ready == "not ready"


def test_on_auth_failure_is_fail_or_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLOOM_WORKER_ON_AUTH_FAILURE", raising=False)
    assert load_worker_settings().on_auth_failure == "fail"
    monkeypatch.setenv("BLOOM_WORKER_ON_AUTH_FAILURE", "wait")
    assert load_worker_settings().on_auth_failure == "wait"
    monkeypatch.setenv("BLOOM_WORKER_ON_AUTH_FAILURE", "later")
    with pytest.raises(SettingsError) as raised:
        load_worker_settings()
    assert "BLOOM_WORKER_ON_AUTH_FAILURE: Input should be 'fail' or 'wait'" in str(raised.value)


def test_the_fingerprint_changes_with_the_credentials(tmp_path: Path) -> None:
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "sk-1"}
    first = fingerprint(env)
    assert fingerprint(dict(env)) == first
    assert "sk-1" not in first
    assert fingerprint(env | {"ANTHROPIC_API_KEY": "sk-2"}) != first
    (tmp_path / ".credentials.json").write_text("{}")
    assert fingerprint(env) != first


class Registrations:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def register_worker(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(body)
        return body


def test_a_refused_login_keeps_the_worker_not_ready_until_it_changes(tmp_path: Path) -> None:
    login = tmp_path / ".credentials.json"
    login.write_text("{}")
    client = Registrations()
    environ = {"CLAUDE_CONFIG_DIR": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    settings = WorkerSettings(name="w1", claude_bin=str(tmp_path / "no-claude"))
    worker = Worker(settings, client, environ=environ)  # type: ignore[arg-type]

    async def scenario() -> None:
        await worker.check_credentials()
        assert worker.not_ready is None
        await worker.credentials_refused(
            "claude", "The Claude CLI could not authenticate (Not logged in)"
        )
        [sent] = client.sent
        assert sent["capabilities"]["ready"] is False
        assert "takes no task until they change" in sent["capabilities"]["not_ready"]
        await worker.check_credentials()  # the same login: still not ready
        assert worker.not_ready == sent["capabilities"]["not_ready"]
        login.write_text('{"claudeAiOauth": {}}')  # logged in again
        await worker.check_credentials()
        assert worker.not_ready is None
        assert worker.refused_credentials == {}

    asyncio.run(scenario())


def two_cli_worker(tmp_path: Path, **environ: str) -> tuple[Worker, Registrations]:
    """A worker that has Claude and Codex (their credentials looked for in `tmp_path`)."""
    (tmp_path / "claude").mkdir()
    (tmp_path / "codex").mkdir()
    client = Registrations()
    settings = WorkerSettings(name="w1", claude_bin=str(tmp_path / "no-claude"))
    env = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "CODEX_HOME": str(tmp_path / "codex"),
        "PATH": os.environ.get("PATH", ""),
    }
    worker = Worker(settings, client, environ=env | environ)  # type: ignore[arg-type]
    worker.clis = {"claude": "2.1.330", "codex": "0.171.0"}
    return worker, client


def test_each_cli_without_credentials_is_left_out_and_none_left_is_not_ready(
    tmp_path: Path,
) -> None:
    worker, _ = two_cli_worker(tmp_path, OPENAI_API_KEY="sk-1")

    async def scenario() -> None:
        await worker.check_credentials()  # Codex has a key, Claude nothing
        capabilities = worker.registration()["capabilities"]
        assert (capabilities["ready"], capabilities["clis"]) == (True, {"codex": "0.171.0"})
        assert "not_ready" not in capabilities
        assert "claude" in worker.unready
        (tmp_path / "claude" / ".credentials.json").write_text("{}")  # Claude logged in
        await worker.check_credentials()
        capabilities = worker.registration()["capabilities"]
        assert capabilities["clis"] == {"claude": "2.1.330", "codex": "0.171.0"}
        assert worker.unready == {}
        del worker.environ["OPENAI_API_KEY"]  # type: ignore[attr-defined]
        (tmp_path / "claude" / ".credentials.json").unlink()
        await worker.check_credentials()  # neither has any: not ready, saying both
        capabilities = worker.registration()["capabilities"]
        assert capabilities["ready"] is False
        assert "clis" not in capabilities  # (a worker without clis has Claude only: not ready)
        assert capabilities["not_ready"].startswith("The Claude CLI has no credentials")
        assert "; The Codex CLI has no credentials" in capabilities["not_ready"]
        assert "OPENAI_API_KEY" in capabilities["not_ready"]
        await worker.credentials_refused("claude", "Invalid API key")  # one that names no CLI
        assert worker.not_ready is not None
        assert worker.not_ready.startswith("claude: Invalid API key; this worker takes no task")

    asyncio.run(scenario())


def test_a_refused_codex_key_leaves_codex_out_until_it_changes_claude_runs_on(
    tmp_path: Path,
) -> None:
    worker, client = two_cli_worker(tmp_path, OPENAI_API_KEY="sk-1")
    (tmp_path / "claude" / ".credentials.json").write_text("{}")

    async def scenario() -> None:
        await worker.check_credentials()
        assert worker.registration()["capabilities"]["clis"].keys() == {"claude", "codex"}
        await worker.credentials_refused("codex", "401 Unauthorized")
        [sent] = client.sent  # registered at once, without Codex
        assert (sent["capabilities"]["ready"], sent["capabilities"]["clis"]) == (
            True,
            {"claude": "2.1.330"},
        )
        assert "takes no task until they change" in worker.unready["codex"]
        assert not worker._waiting()  # Claude's tasks still come: its slots claim on
        await worker.check_credentials()  # the same key: Codex still left out
        assert "codex" not in worker.registration()["capabilities"]["clis"]
        worker.environ["OPENAI_API_KEY"] = "sk-2"  # type: ignore[index]
        await worker.check_credentials()
        assert worker.registration()["capabilities"]["clis"].keys() == {"claude", "codex"}
        assert worker.refused_credentials == {}

    asyncio.run(scenario())


def test_a_refused_login_of_the_only_cli_left_makes_the_worker_wait(tmp_path: Path) -> None:
    worker, _ = two_cli_worker(tmp_path, OPENAI_API_KEY="sk-1")

    async def scenario() -> None:
        await worker.check_credentials()  # Codex alone can run
        await worker.credentials_refused("codex", "401 Unauthorized")
        assert worker._waiting()  # nothing left to run: its slots stop claiming
        assert worker.registration()["capabilities"]["ready"] is False

    asyncio.run(scenario())
