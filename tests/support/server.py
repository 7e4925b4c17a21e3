"""A real `bloom runtime serve` process for end-to-end tests."""

import os
from pathlib import Path

import httpx

from tests.support.net import closed_port
from tests.support.process import ServerProcess


class RuntimeProcess(ServerProcess):
    """The runtime on `database_url`, with `env` on top of a test-friendly environment."""

    command = ("runtime", "serve")
    health_path = "/api/runtime/health"
    name = "runtime"

    def __init__(self, database_url: str, data_dir: Path, **env: str):
        super().__init__(data_dir)
        self.database_url = database_url
        self.extra_env = env
        # Nothing listens there, unless the test passes the URL of a Membridge it started.
        self.membridge_url = (
            env.get("BLOOM_MEMBRIDGE_URL")
            or env.get("MEMBRIDGE_SERVER_URL")
            or f"http://127.0.0.1:{closed_port()}"
        )

    def environment(self) -> dict[str, str]:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "BLOOM_DATA_DIR": str(self.data_dir),
            "BLOOM_ACCESS_LOG": "false",
            "BLOOM_MEMBRIDGE_URL": self.membridge_url,
            "BLOOM_MEMBRIDGE_RETRIES": "0",
            "BLOOM_RATE_LIMIT_ENABLED": "false",  # tests of the limits turn them on
            **self.extra_env,
        }
        if "RUNTIME_API_KEY" not in self.extra_env:
            env.pop("RUNTIME_API_KEY", None)
        return env


def queue_tasks(database_url: str, data_dir: Path, count: int) -> None:
    """`count` tasks created through a runtime process on `database_url`, then stopped."""
    runtime = RuntimeProcess(database_url, data_dir)
    runtime.start()
    try:
        body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
        for _ in range(count):
            created = httpx.post(f"{runtime.url}/api/runtime/llm-tasks", json=body)
            assert created.status_code == 201, created.text
    finally:
        runtime.stop()
