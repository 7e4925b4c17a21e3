"""Real worker processes running the real Claude CLI, and the echo model standing in for the
Anthropic API, for end-to-end tests."""

import os
import sys
from pathlib import Path
from typing import Any

import httpx

from bloom.worker.agents.claude.install import cached_binary, find_claude
from tests.support.process import ServerProcess

CLAUDE_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "claude-cli"


def claude_binary() -> Path | None:
    """The pinned Claude CLI from the project cache (`.ci/run` installs it), else `claude`."""
    override = os.environ.get("BLOOM_TEST_CLAUDE_BIN")
    if override:
        return Path(override)
    return cached_binary(CLAUDE_CACHE) or find_claude(CLAUDE_CACHE)


class EchoModelProcess(ServerProcess):
    command = ("echo-model", "serve")
    health_path = "/_requests"
    name = "model"

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def requests(self) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = httpx.get(f"{self.url}/_requests", timeout=5).json()
        return seen


class WorkerProcess(ServerProcess):
    """`bloom worker run` as `name`, with its own HOME (Claude's sessions live there); ready
    when the runtime lists it online."""

    command = ("worker", "run")

    def __init__(
        self,
        name: str,
        data_dir: Path,
        runtime_url: str,
        model_url: str,
        claude: Path,
        **env: str,
    ):
        self.name = name
        super().__init__(data_dir)
        self.home = data_dir / f"home-{name}"
        self.runtime_url = runtime_url.split(",")[0]  # several: replicas, the first asked first
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "BLOOM_DATA_DIR": str(data_dir),
            "BLOOM_WORKER_NAME": name,
            "BLOOM_RUNTIME_URL": runtime_url,
            "BLOOM_CLAUDE_BIN": str(claude),
            "BLOOM_CLAUDE_ARGS": '["--bare"]',
            "BLOOM_WORKER_HEARTBEAT_SEC": "1",
            "BLOOM_WORKER_CLAIM_WAIT_SEC": "5",
            "BLOOM_LOG_FORMAT": "console",
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "test-model-key",
            **env,
        }
        for seed_name in ("RUNTIME_API_KEY", "MEMBRIDGE_ADMIN_KEY", "DATABASE_URL"):
            if seed_name not in env:
                self.env.pop(seed_name, None)

    @property
    def work_dir(self) -> Path:
        return self.data_dir / "worker" / self.name

    def environment(self) -> dict[str, str]:
        self.home.mkdir(parents=True, exist_ok=True)
        return self.env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "bloom.cli.main", *self.command, *args]

    def ready(self) -> bool:
        key = self.env.get("BLOOM_WORKER_API_KEY")
        if key:  # a worker key may not read the registry: ready once it claims (well, polls)
            return "worker_ready" in self.log()
        worker = httpx.get(f"{self.runtime_url}/api/runtime/workers/{self.name}", timeout=2)
        return worker.status_code == 200 and worker.json()["status"] == "online"
