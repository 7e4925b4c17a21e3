"""The bench's own `bloom runtime serve`: on a free port, quiet, stopped whatever happens."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bloom.bench.http import Endpoint, HttpClientError, HttpConnection

STOP_TIMEOUT_SEC = 20.0
LOG_TAIL_CHARS = 3000
# Settings the server must not inherit from the caller's shell: the bench sets its own.
INHERITED_OUT = ("RUNTIME_API_KEY", "BLOOM_API_KEY", "BLOOM_HOST", "BLOOM_PORT", "PORT")


PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """A process and its descendants together: resident memory, open descriptors, CPU used."""

    rss_kb: int
    fds: int
    cpu_sec: float


def on_linux() -> bool:
    """Whether /proc can be read for a process's memory and descriptors."""
    return PROC.joinpath("self", "fd").is_dir()


def process_tree(pid: int) -> ProcessUsage:
    """`pid` and its descendants, from /proc (Linux only)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    rss_kb = fds = ticks = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        pending.extend(children.get(current, []))
        try:
            status = (PROC / str(current) / "status").read_text()
            fields = (PROC / str(current) / "stat").read_text().rsplit(")", 1)[1].split()
            fds += len(os.listdir(PROC / str(current) / "fd"))
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kb += int(line.split()[1])
    return ProcessUsage(rss_kb, fds, ticks / os.sysconf("SC_CLK_TCK"))


class ServerError(RuntimeError):
    """The server did not start, or died."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnServer:
    """`async with OwnServer(url, workers, data_dir) as endpoint:` runs a runtime meanwhile."""

    def __init__(self, database_url: str, server_workers: int, data_dir: Path):
        self.database_url = database_url
        self.server_workers = server_workers
        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = data_dir / "bench-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Endpoint:
        self._spawn()
        endpoint = Endpoint("127.0.0.1", self.port)
        try:
            await self._wait_healthy(endpoint, limit_sec=60.0)
        except BaseException:
            self.stop()
            raise
        return endpoint

    @property
    def pid(self) -> int:
        """The server's process (the parent of its workers with `server_workers` above 1)."""
        if self.process is None:
            raise ServerError("the runtime server is not running")
        return self.process.pid

    def _spawn(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in INHERITED_OUT}
        env |= {
            "DATABASE_URL": self.database_url,
            "BLOOM_DATABASE_URL": self.database_url,
            "BLOOM_DATA_DIR": str(self.data_dir),
            "BLOOM_ACCESS_LOG": "false",
            "BLOOM_LOG_LEVEL": env.get("BLOOM_LOG_LEVEL", "warning"),
            # It drives thousands of requests per second from one address, on purpose.
            "BLOOM_RATE_LIMIT_ENABLED": "false",
        }
        command = [sys.executable, "-m", "bloom.cli.main", "runtime", "serve"]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--workers", str(self.server_workers)]
        with self.log_path.open("ab") as log:
            # Its own session: a Ctrl-C reaches only the bench, which then stops the server.
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and CLI
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def _wait_healthy(self, endpoint: Endpoint, limit_sec: float) -> None:
        deadline = time.monotonic() + limit_sec
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ServerError(f"the runtime server exited early:\n{self.log_tail()}")
            conn = HttpConnection(endpoint, timeout=2.0)
            try:
                if (await conn.request("GET", "/api/runtime/health")).status == 200:
                    return
            except HttpClientError:
                pass
            finally:
                conn.close()
            await asyncio.sleep(0.1)
        raise ServerError(f"the runtime server was not healthy after {limit_sec:g}s")

    def stop(self) -> None:
        """SIGTERM (a graceful shutdown), then SIGKILL to its process group if it hangs."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SEC)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def log_tail(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
