"""A mixed fleet, real workers and real CLIs on the echo model: one worker runs Claude only (it
has neither the Codex nor the Gemini CLI), the other Codex and Gemini (it has the Claude CLI but
no credentials for it, so it leaves Claude out of the CLIs it registers). A task for a CLI no
online worker has waits, saying so in the API's answer and `bloom task show`; once a worker with
it comes, each task lands on a worker that can run its CLI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloom.worker.agents.codex.install import PINNED_VERSION as CODEX_VERSION
from bloom.worker.agents.gemini.install import PINNED_VERSION as GEMINI_VERSION
from tests.support.codex import codex_binary, codex_worker_env
from tests.support.gemini import gemini_binary, gemini_worker_env
from tests.support.required import unavailable
from tests.support.stack import Stack

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def codex() -> Path:
    path = codex_binary()
    if path is None:
        unavailable("the Codex CLI is not installed: `bloom agents install codex`")
    return path


@pytest.fixture
def gemini() -> Path:
    path = gemini_binary()
    if path is None:
        unavailable("the Gemini CLI is not installed: `bloom agents install gemini`")
    return path


def shown(stack: Stack, task_id: str) -> str:
    """What `bloom task show` prints of the task."""
    done = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "task", "show", task_id],
        env={**os.environ, "BLOOM_RUNTIME_URL": stack.runtime.url, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_each_task_lands_on_a_worker_with_its_cli_and_a_missing_one_waits(
    stack: Stack, codex: Path, gemini: Path
) -> None:
    nowhere = str(stack.data_dir / "not-here")
    stack.add_worker("w-claude", BLOOM_CODEX_BIN=nowhere, BLOOM_GEMINI_BIN=nowhere)
    assert stack.http.get("/workers/w-claude").json()["capabilities"]["clis"].keys() == {"claude"}

    # the first claimable, for CLIs no online worker has: they wait, and say why
    waiting = {
        cli: stack.submit(f"hello {cli}", cli=cli, priority=9) for cli in ("codex", "gemini")
    }
    claude = stack.submit("hello claude", cli="claude")
    done = stack.wait(claude, timeout=60)
    assert done["status"] == "completed", (done, stack.logs()[-4000:])
    assert (done["cli"], done["worker_id"]) == ("claude", "w-claude")
    for cli, task_id in waiting.items():
        task = stack.task(task_id)
        assert (task["status"], task["attempts"]) == ("queued", 0)
        assert task["waiting_for"] == {"reason": "no_worker_with_cli", "cli": cli}
        assert f"no online worker has the {cli} CLI" in shown(stack, task_id)

    no_claude_credentials = {name: "" for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    others = codex_worker_env(codex, stack.model.url) | gemini_worker_env(
        gemini, stack.model.url, stack.data_dir / "gemini-home"
    )
    stack.add_worker("w-others", **others, **no_claude_credentials)
    capabilities = stack.http.get("/workers/w-others").json()["capabilities"]
    assert capabilities["clis"] == {"codex": CODEX_VERSION, "gemini": GEMINI_VERSION}
    assert capabilities["ready"] is True  # Claude left out, not the worker
    for cli, task_id in waiting.items():
        done = stack.wait(task_id, timeout=90)
        assert done["status"] == "completed", (done, stack.logs()[-4000:])
        assert (done["cli"], done["worker_id"]) == (cli, "w-others")
        assert stack.output(task_id) == f"echo: hello {cli}"
