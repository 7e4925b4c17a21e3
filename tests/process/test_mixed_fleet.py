"""A mixed fleet, real workers and real CLIs on the echo model: one worker runs Claude only (it
has no Codex CLI), the other Codex only (it has the Claude CLI but no credentials for it, so it
leaves Claude out of the CLIs it registers). Each task lands on a worker that can run its CLI,
and a task for a CLI no worker has waits, saying so in the API's answer and `bloom task show`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloom.worker.agents.codex.install import PINNED_VERSION
from tests.support.codex import codex_binary, codex_worker_env
from tests.support.required import unavailable
from tests.support.stack import Stack

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def codex() -> Path:
    path = codex_binary()
    if path is None:
        unavailable("the Codex CLI is not installed: `bloom agents install codex`")
    return path


def test_each_task_lands_on_a_worker_with_its_cli_and_a_missing_one_waits(
    stack: Stack, codex: Path
) -> None:
    stack.add_worker("w-claude", BLOOM_CODEX_BIN=str(stack.data_dir / "no-codex"))
    no_claude_credentials = {name: "" for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    stack.add_worker("w-codex", **codex_worker_env(codex, stack.model.url), **no_claude_credentials)
    capabilities = {
        name: stack.http.get(f"/workers/{name}").json()["capabilities"]
        for name in ("w-claude", "w-codex")
    }
    assert capabilities["w-claude"]["clis"].keys() == {"claude"}
    assert capabilities["w-codex"]["clis"] == {"codex": PINNED_VERSION}  # Claude left out
    assert capabilities["w-codex"]["ready"] is True

    gemini = stack.submit("hello gemini", cli="gemini", priority=9)  # the first claimable
    by_cli = {cli: stack.submit(f"hello {cli}", cli=cli) for cli in ("claude", "codex")}
    for cli, task_id in by_cli.items():
        done = stack.wait(task_id, timeout=60)
        assert done["status"] == "completed", (done, stack.logs()[-4000:])
        assert (done["cli"], done["worker_id"]) == (cli, f"w-{cli}")
        assert stack.output(task_id) == f"echo: hello {cli}"

    waiting = stack.task(gemini)
    assert (waiting["status"], waiting["attempts"]) == ("queued", 0)
    assert waiting["waiting_for"] == {"reason": "no_worker_with_cli", "cli": "gemini"}
    shown = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "task", "show", gemini],
        env={**os.environ, "BLOOM_RUNTIME_URL": stack.runtime.url, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "no online worker has the gemini CLI" in shown.stdout + shown.stderr
