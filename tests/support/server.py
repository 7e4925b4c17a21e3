"""A real `bloom runtime serve` process for end-to-end tests: start, wait, kill -9, restart."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.net import closed_port, free_port


class RuntimeProcess:
    """The runtime as a child process on a free port, with its output kept in a log file."""

    def __init__(self, database_url: str, data_dir: Path, **env: str):
        self.database_url = database_url
        self.data_dir = data_dir
        self.port = free_port()
        self.extra_env = env
        # Nothing listens there, unless the test passes the URL of a Membridge it started.
        self.membridge_url = (
            env.get("BLOOM_MEMBRIDGE_URL")
            or env.get("MEMBRIDGE_SERVER_URL")
            or f"http://127.0.0.1:{closed_port()}"
        )
        self.log_path = data_dir / f"runtime-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *args: str, timeout: float = 30.0) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "BLOOM_DATA_DIR": str(self.data_dir),
            "BLOOM_ACCESS_LOG": "false",
            "BLOOM_MEMBRIDGE_URL": self.membridge_url,
            "BLOOM_MEMBRIDGE_RETRIES": "0",
            **self.extra_env,
        }
        if "RUNTIME_API_KEY" not in self.extra_env:
            env.pop("RUNTIME_API_KEY", None)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bloom.cli.main",
                "runtime",
                "serve",
                "--port",
                str(self.port),
                *args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"runtime exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/runtime/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"runtime not ready after {timeout}s:\n{self.log()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the server (default: kill -9, no chance to clean up)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
