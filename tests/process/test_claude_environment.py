"""What reaches the Claude CLI that a real worker runs: a fake `claude` records its environment.
The worker's keys, the node's other secrets and every name not allowed stay out; Claude's own
credentials, the names the operator lists and what the worker sets for the run come in. And
the worker, not dumpable, keeps its own environment from what it runs as its own user."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloom.worker.agents.claude.env import child_environment
from tests.support.nginx import tool
from tests.support.stack import Stack

ADMIN_KEY = "rt-admin-key-5e1f0c9a7b3d2e84"
ANTHROPIC_KEY = "sk-ant-fake-7c2e9a4b1d8f3e60"
NODE_SECRETS = {
    "RUNTIME_API_KEY": ADMIN_KEY,  # a seed-style env file shares the runtime's
    "DATABASE_URL": "postgresql://bloom:db-password-3c9e@db.internal:5432/bloom",
    "MINIO_SECRET_KEY": "minio-secret-8d2b6f1a",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-4a7c1e9d",
    "REDIS_URL": "redis://:redis-password-6b0d@redis.internal:6379/0",
    "BLOOM_SECRET_KEY": "cookie-secret-2f8a5c3e",
    "MEMBRIDGE_AGENT_KEY": "agent-key-9e4b7d1c",
}
LISTED = {"GH_TOKEN": "gh-token-for-claude", "ACME_REGION": "eu", "ACME_ENDPOINT": "https://a"}
FAKE_CLAUDE = """#!{python}
import json, sys
raw = open("/proc/self/environ", "rb").read().decode()
with open({record!r}, "w") as out:
    json.dump(dict(item.split("=", 1) for item in raw.split("\\0") if item), out)
sys.stdin.read()
print(json.dumps({{"type": "result", "result": "recorded", "session_id": "s-1"}}))
"""


def fake_claude(path: Path, record: Path) -> Path:
    """A `claude` that writes the environment it was started with to `record`, then succeeds."""
    path.write_text(FAKE_CLAUDE.format(python=sys.executable, record=str(record)))
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_cli_gets_the_allow_list_and_nothing_else(database_url: str, tmp_path: Path) -> None:
    record = tmp_path / "claude-env.json"
    stack = Stack(database_url, tmp_path, fake_claude(tmp_path / "claude", record), ADMIN_KEY)
    try:
        stack.start()
        worker = stack.add_worker(
            "w1",
            **NODE_SECRETS,
            **LISTED,
            BLOOM_CLAUDE_ENV="GH_TOKEN, ACME_*",
            UNLISTED_SETTING="not for claude",
            ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LANG="C.UTF-8",
        )
        task_id = stack.submit("what do you see?")
        assert stack.wait(task_id)["status"] == "completed", stack.logs()[-3000:]
        assert stack.output(task_id) == "recorded"
        seen = json.loads(record.read_text())
        given = worker.env
        secrets = NODE_SECRETS | {
            name: given[name] for name in ("BLOOM_WORKER_API_KEY", "MEMBRIDGE_ADMIN_KEY")
        }
        for name, value in secrets.items():
            assert name not in seen
            assert value not in json.dumps(seen), f"the value of {name} reached Claude"
        assert [name for name in seen if name.startswith(("BLOOM_", "MEMBRIDGE_"))] == []
        assert "UNLISTED_SETTING" not in seen
        assert {name: seen.get(name) for name in LISTED} == LISTED
        assert (seen["ANTHROPIC_API_KEY"], seen["ANTHROPIC_BASE_URL"]) == (
            ANTHROPIC_KEY,
            stack.model.url,
        )
        assert (seen["PATH"], seen["HOME"], seen["LANG"]) == (
            given["PATH"],
            given["HOME"],
            "C.UTF-8",
        )
        assert seen == child_environment(given, "default", ("GH_TOKEN", "ACME_*"))

        named = stack.submit("and for an agent?", agent_slug="reviewer")
        assert stack.wait(named)["status"] == "completed", stack.logs()[-3000:]
        assert json.loads(record.read_text())["CLAUDE_PROJECT_ID"] == "reviewer"
    finally:
        stack.close()


PARENT = """
import os, subprocess, sys
from bloom.worker.agents.process import undumpable
if sys.argv[1] == "undumpable":
    undumpable()
child = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True, text=True)
print("WORKER_KEY=k" in child.stdout or child.stderr.strip())
"""


def test_what_the_worker_runs_cannot_read_its_environment() -> None:
    """A child running as the worker's user (not root: root reads any process's environment)
    reads its parent's /proc/<pid>/environ, unless the parent made itself undumpable as the
    worker does at start."""
    as_user = (
        [tool("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups"]
        if os.geteuid() == 0
        else []
    )
    seen = {
        mode: subprocess.run(
            [*as_user, sys.executable, "-c", PARENT, mode],
            env={"PATH": os.environ["PATH"], "WORKER_KEY": "k"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        for mode in ("dumpable", "undumpable")
    }
    assert seen["dumpable"] == "True"
    assert seen["undumpable"].endswith("environ: Permission denied"), seen
