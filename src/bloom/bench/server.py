"""The processes the bench starts (its own `bloom runtime serve`, on a free port, quiet), stopped
whatever happens; their memory, descriptors and CPU from /proc."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType

from bloom.bench.http import Endpoint, HttpClientError, HttpConnection, Response
from bloom.db.database import DatabaseTarget, StorageKind, resolve_database

STOP_TIMEOUT_SEC = 20.0
PORT_ATTEMPTS = 3
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
            stat = (PROC / str(current) / "stat").read_text()
            fds += len(os.listdir(PROC / str(current) / "fd"))
        except OSError:
            continue
        ticks += _cpu_ticks(stat)
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kb += int(line.split()[1])
    return ProcessUsage(rss_kb, fds, ticks / os.sysconf("SC_CLK_TCK"))


def process_cpu_sec(pid: int) -> float | None:
    """The CPU time of `pid` alone, from /proc (Linux only); None once it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return _cpu_ticks(stat) / os.sysconf("SC_CLK_TCK")


def _cpu_ticks(stat: str) -> int:
    """User and system time in a /proc/<pid>/stat line, in clock ticks."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def machine_cpu_sec() -> float:
    """CPU time all cores of this machine have spent at work since boot, from /proc/stat (Linux
    only): every process's, in user and kernel mode with interrupts; idle, I/O wait and time
    the hypervisor took away (steal) left out."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(n) for n in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class ServerError(RuntimeError):
    """The server (or another process the bench started) did not start, or died."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def answers(
    endpoint: Endpoint, path: str, accept: Callable[[Response], bool] = lambda r: r.status == 200
) -> bool:
    """Whether `GET path` answers as `accept` wants (a refused connection: no)."""
    conn = HttpConnection(endpoint, timeout=2.0)
    try:
        return accept(await conn.request("GET", path))
    except HttpClientError:
        return False
    finally:
        conn.close()


class OwnProcess:
    """A `bloom …` command the bench runs beside itself: its output in a log file, in a session
    of its own (a Ctrl-C reaches only the bench, which then stops it), stopped whatever happens."""

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str], log_path: Path):
        self.name = name
        self.args = list(args)
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process (the parent of a server's workers, when it has several)."""
        if self.process is None:
            raise ServerError(f"the {self.name} is not running")
        return self.process.pid

    def start(self) -> None:
        command = [sys.executable, "-m", "bloom.cli.main", *self.args]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and CLI
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def wait_ready(self, ready: Callable[[], Awaitable[bool]], limit_sec: float) -> None:
        """Until `ready()` says so; ServerError if the process exits or `limit_sec` passes."""
        deadline = time.monotonic() + limit_sec
        while time.monotonic() < deadline:
            self.check_running()
            if await ready():
                return
            await asyncio.sleep(0.1)
        raise ServerError(f"the {self.name} was not ready after {limit_sec:g}s")

    def check_running(self) -> None:
        """ServerError, with the end of its log, once the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise ServerError(f"the {self.name} exited:\n{self.log_tail()}")

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


class OwnServer(OwnProcess):
    """`async with OwnServer(url, workers, data_dir) as endpoint:` runs a runtime meanwhile."""

    def __init__(self, database_url: str, server_workers: int, data_dir: Path):
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in INHERITED_OUT}
        env |= {
            "DATABASE_URL": database_url,
            "BLOOM_DATABASE_URL": database_url,
            "BLOOM_DATA_DIR": str(data_dir),
            "BLOOM_ACCESS_LOG": "false",
            "BLOOM_LOG_LEVEL": env.get("BLOOM_LOG_LEVEL", "warning"),
            # It drives thousands of requests per second from one address, on purpose.
            "BLOOM_RATE_LIMIT_ENABLED": "false",
        }
        self.server_workers = server_workers
        super().__init__("runtime server", self._args(), env, data_dir / "bench-server.log")

    def _args(self) -> list[str]:
        args = ["runtime", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        return [*args, "--workers", str(self.server_workers)]

    async def __aenter__(self) -> Endpoint:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.start()
            endpoint = Endpoint("127.0.0.1", self.port)
            try:
                await self.wait_ready(partial(answers, endpoint, "/api/runtime/health"), 60.0)
            except ServerError:
                self.stop()
                # The free port found was taken before the server bound it: another one.
                if attempt == PORT_ATTEMPTS or "address already in use" not in self.log_tail():
                    raise
                self.port = free_port()
                self.args = self._args()
                continue
            except BaseException:
                self.stop()
                raise
            return endpoint
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ModeUsageError(ValueError):
    """Options a mode that starts its own server cannot run with."""


@dataclass(frozen=True, slots=True)
class OwnRuntime:
    server: OwnServer
    endpoint: Endpoint
    target: DatabaseTarget
    data_dir: Path


async def own_runtime(
    stack: AsyncExitStack, mode: str, database_url: str | None, server_workers: int
) -> OwnRuntime:
    """A runtime of the mode's own while `stack` lasts: on `database_url`, else on a SQLite file
    in a temporary directory that goes with it (where the server's log is kept too)."""
    data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bloom-{mode}-")))
    database_url = database_url or f"sqlite:///{data_dir / f'{mode}.db'}"
    target = resolve_database(database_url, data_dir)
    if server_workers > 1 and target.kind is StorageKind.SQLITE:
        raise ModeUsageError("--server-workers above 1 needs a postgresql:// --database-url")
    server = OwnServer(database_url, server_workers, data_dir)
    endpoint = await stack.enter_async_context(server)
    return OwnRuntime(server, endpoint, target, data_dir)
