"""A server of ours as a child process on a free port: start, wait for health, kill -9, restart.
Its output goes to a log file the test can read."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.net import free_port


class ServerProcess:
    """`bloom <command> serve --port N` with `environment()`; ready when `health_path` answers."""

    command: tuple[str, ...]
    health_path: str
    name: str

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = data_dir / f"{self.name}-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        raise NotImplementedError

    def start(self, *args: str, timeout: float = 30.0) -> None:
        """Start (again: same port, same database) and wait until it answers its health."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(*args),
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_ready(timeout)

    def argv(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bloom.cli.main",
            *self.command,
            "--port",
            str(self.port),
            *args,
        ]

    def ready(self) -> bool:
        return httpx.get(f"{self.url}{self.health_path}", timeout=1).status_code == 200

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log()}")
            try:
                if self.ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the server (default: kill -9, no chance to clean up)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
