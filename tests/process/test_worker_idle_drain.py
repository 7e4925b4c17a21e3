"""A worker that claims nothing (`bloom worker run --no-claim`) and has nothing running drains
cleanly (issue 29, item 10: it waited on an empty set of tasks, so SIGTERM ended it with 1 and a
traceback, and /restart or a successful /self-update killed it instead of bringing it back)."""

import signal
from pathlib import Path

import httpx
import pytest

from tests.support.git import GitServer, git
from tests.support.net import closed_port, free_port
from tests.support.server import RuntimeProcess
from tests.support.stack import wait_for
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

KEY = {"X-MEMBRIDGE-AGENT": "idle-drain-agent-key"}


def idle_worker(runtime: RuntimeProcess, tmp_path: Path, **env: str) -> WorkerProcess:
    """`bloom worker run --no-claim` as `idle`, registered with `runtime`. Its Claude CLI is a
    stand-in that fails: nothing may run here."""
    claude = tmp_path / "claude"
    claude.write_text("#!/bin/sh\nexit 99\n")
    claude.chmod(0o755)
    model = f"http://127.0.0.1:{closed_port()}"
    worker = WorkerProcess("idle", tmp_path, runtime.url, model, claude, **env)
    worker.start("--no-claim")
    return worker


def test_sigterm_stops_an_idle_worker_with_0(
    runtime_process: RuntimeProcess, tmp_path: Path
) -> None:
    worker = idle_worker(runtime_process, tmp_path)
    assert worker.process is not None
    worker.kill(signal.SIGTERM)
    assert worker.process.returncode == 0, worker.log()
    log = worker.log()
    assert "Traceback" not in log
    assert "worker_stopped" in log
    said = httpx.get(f"{runtime_process.url}/api/runtime/workers/idle", timeout=5).json()
    assert said["status"] == "offline"  # it said goodbye


@pytest.mark.parametrize("control", ["restart", "self-update"])
def test_an_idle_worker_told_to_restart_comes_back(
    control: str, runtime_process: RuntimeProcess, tmp_path: Path, git_server: GitServer
) -> None:
    """The same process runs its command line again (exec), serves and stops as before."""
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", git_server.repository("bloom", {"VERSION": "1\n"}), str(checkout))
    git_server.commit("bloom", {"VERSION": "2\n"})  # what a self-update fast-forwards to
    port = free_port()
    worker = idle_worker(
        runtime_process,
        tmp_path,
        BLOOM_WORKER_AGENT_PORT=str(port),
        BLOOM_AGENT_KEY=KEY["X-MEMBRIDGE-AGENT"],
        BLOOM_WORKER_ALLOW_PROCESS_CONTROL="true",
        BLOOM_WORKER_CHECKOUT=str(checkout),
    )
    assert worker.process is not None
    url = f"http://127.0.0.1:{port}"
    before = httpx.get(f"{url}/health", timeout=5).json()
    answer = httpx.post(f"{url}/{control}", headers=KEY, timeout=60).json()
    assert answer["ok"] is True, answer
    if control == "self-update":
        assert (checkout / "VERSION").read_text() == "2\n"

    def started_again() -> dict[str, object] | None:
        try:
            health: dict[str, object] = httpx.get(f"{url}/health", timeout=2).json()
        except httpx.HTTPError:
            return None
        return health if health["started_at"] != before["started_at"] else None

    after = wait_for(started_again, 60, "the worker started again")
    assert after["pid"] == before["pid"] == worker.process.pid  # exec: the same process
    assert worker.process.poll() is None
    assert "worker_restarting" in worker.log()
    worker.kill(signal.SIGTERM)
    assert worker.process.returncode == 0, worker.log()
    assert "Traceback" not in worker.log()
