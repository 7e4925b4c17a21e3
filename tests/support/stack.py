"""The whole system as real processes for end-to-end tests: the echo model, Membridge, the
runtime and workers running the real Claude CLI, with the runtime's HTTP API at hand."""

import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import httpx

from bloom.domain.states import TERMINAL
from tests.support.membridge import MembridgeProcess
from tests.support.server import RuntimeProcess
from tests.support.worker import EchoModelProcess, WorkerProcess


class Stack:
    """Membridge, runtime, echo model and workers, with the runtime's HTTP API at hand.

    With `admin_key` the runtime requires keys: the stack's client uses the admin key and each
    worker gets a worker key of its own, made with `bloom key create`."""

    def __init__(
        self,
        database_url: str,
        data_dir: Path,
        claude: Path,
        admin_key: str | None = None,
        **runtime_env: str,
    ):
        self.data_dir = data_dir
        self.claude = claude
        self.database_url = database_url
        self.admin_key = admin_key
        secured = {"RUNTIME_API_KEY": admin_key} if admin_key else {}
        self.model = EchoModelProcess(data_dir)
        self.membridge = MembridgeProcess(data_dir)
        self.runtime = RuntimeProcess(
            database_url,
            data_dir,
            BLOOM_MEMBRIDGE_URL=self.membridge.url,
            MEMBRIDGE_ADMIN_KEY=self.membridge.admin_key or "",
            BLOOM_REAPER_INTERVAL_SEC="0.5",
            BLOOM_RETRY_BASE_SEC="0.5",
            BLOOM_WORKER_SYNC_SEC="1",
            **secured,
            **runtime_env,
        )
        self.workers: dict[str, WorkerProcess] = {}
        self.headers = {"X-Runtime-API-Key": admin_key} if admin_key else {}
        self.http = httpx.Client(
            base_url=self.runtime.url + "/api/runtime", timeout=30, headers=self.headers
        )

    def start(self) -> None:
        self.model.start()
        self.membridge.start()
        self.runtime.start()

    def worker_key(self, name: str) -> str:
        """A worker key for `name`, made as an operator would."""
        return self.make_key("worker", "--worker", name)

    def make_key(self, role: str, *options: str) -> str:
        """A key of `role` made with `bloom key create`, as an operator would."""
        made = subprocess.run(
            [sys.executable, "-m", "bloom.cli.main", "key", "create", "--role", role, *options],
            env={
                **os.environ,
                "DATABASE_URL": self.database_url,
                "BLOOM_DATA_DIR": str(self.data_dir),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return made.stdout.strip()

    def add_worker(self, name: str, **env: str) -> WorkerProcess:
        if self.admin_key:
            env = {"BLOOM_WORKER_API_KEY": self.worker_key(name), **env}
        worker = WorkerProcess(
            name,
            self.data_dir,
            self.runtime.url,
            self.model.url,
            self.claude,
            BLOOM_MEMBRIDGE_URL=self.membridge.url,
            MEMBRIDGE_ADMIN_KEY=self.membridge.admin_key or "",
            BLOOM_WORKER_LEASE_TTL_SEC="5",
            **env,
        )
        worker.start()
        self.workers[name] = worker
        return worker

    def close(self) -> None:
        self.http.close()
        for worker in self.workers.values():
            worker.kill()
        for server in (self.runtime, self.membridge, self.model):
            server.stop()

    def submit(self, prompt: str, **fields: Any) -> str:
        body = {"context_id": f"ctx-{time.monotonic_ns()}", "agent_slug": "default"} | fields
        response = self.http.post("/llm-tasks", json={"prompt": prompt} | body)
        assert response.status_code == 201, response.text
        task_id: str = response.json()["id"]
        return task_id

    def task(self, task_id: str) -> dict[str, Any]:
        task: dict[str, Any] = self.http.get(f"/llm-tasks/{task_id}").json()
        return task

    def wait(
        self, task_id: str, statuses: Collection[str] = TERMINAL, timeout: float = 60
    ) -> dict[str, Any]:
        task: dict[str, Any] = wait_for(
            lambda: self._in(task_id, statuses), timeout, f"{task_id} in {statuses}"
        )
        return task

    def _in(self, task_id: str, statuses: Collection[str]) -> dict[str, Any] | None:
        task = self.task(task_id)
        return task if task["status"] in statuses else None

    def output(self, task_id: str) -> str:
        artifacts = self.http.get("/artifacts", params={"task_id": task_id}).json()
        assert len(artifacts) == 1, artifacts
        return self.http.get(f"/artifacts/{artifacts[0]['id']}/content").text

    def logs(self) -> str:
        parts = [self.runtime.log(), self.membridge.log(), self.model.log()]
        return "\n".join(parts + [w.log() for w in self.workers.values()])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
