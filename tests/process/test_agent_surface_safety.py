"""A real worker's agent surface (`bloom worker run --agent-port`): it refuses to listen beyond
loopback without an agent key unless told `--insecure` (as the servers refuse without theirs),
and refuses a body over the limit with 413, declared or chunked, without growing its memory."""

import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.net import closed_port
from tests.support.process import ServerProcess

KEY = "agent-key-for-safety-tests"
LARGE = 400 * 1024 * 1024
PIECE = 64 * 1024


def worker_env(data_dir: Path, **env: str) -> dict[str, str]:
    """A worker whose runtime is never there (it keeps asking): its agent surface serves on."""
    seeds = ("RUNTIME_API_KEY", "MEMBRIDGE_ADMIN_KEY", "DATABASE_URL", "MEMBRIDGE_AGENT_KEY")
    return {
        **{name: value for name, value in os.environ.items() if name not in seeds},
        "HOME": str(data_dir / "home"),
        "BLOOM_DATA_DIR": str(data_dir),
        "BLOOM_WORKER_NAME": "agent-n1",
        "BLOOM_RUNTIME_URL": f"http://127.0.0.1:{closed_port()}",
        "BLOOM_CLAUDE_BIN": shutil.which("true") or "true",
        "BLOOM_LOG_FORMAT": "console",
        **env,
    }


class AgentProcess(ServerProcess):
    """`bloom worker run --agent-port N`; ready when its agent surface answers health."""

    command = ("worker", "run")
    health_path = "/health"
    name = "agent"

    def __init__(self, data_dir: Path, **env: str):
        super().__init__(data_dir)
        self.env = worker_env(data_dir, **env)

    def environment(self) -> dict[str, str]:
        return self.env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "bloom.cli.main", *self.command, "--agent-port",
                str(self.port), *args]  # fmt: skip

    def resident_bytes(self) -> int:
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024


def run_worker(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "worker", "run", *args],
        env=worker_env(tmp_path, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--agent-host", "0.0.0.0"], {}),
        (["--agent-host", "10.1.2.3"], {}),
        ([], {"BLOOM_WORKER_AGENT_HOST": "0.0.0.0"}),
    ],
    ids=["option", "address", "environment"],
)
def test_the_worker_refuses_an_open_agent_surface_without_a_key(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    done = run_worker(tmp_path, "--agent-port", str(closed_port()), *args, **env)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    host = args[1] if args else env["BLOOM_WORKER_AGENT_HOST"]
    assert line.startswith(f"bloom: refusing to serve the agent surface on {host} without an agent")
    assert "BLOOM_AGENT_KEY" in line
    assert "--insecure" in line


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """On loopback, with an agent key and the default body limit (5 MiB)."""
    process = AgentProcess(tmp_path, BLOOM_AGENT_KEY=KEY)
    process.start()
    yield process
    process.stop()


def test_insecure_serves_the_open_surface_and_says_so(tmp_path: Path) -> None:
    process = AgentProcess(tmp_path)
    process.start("--agent-host", "0.0.0.0", "--insecure")
    try:
        assert httpx.get(f"{process.url}/health").json()["node_id"] == "agent-n1"
        assert "agent_insecure" in process.log()
    finally:
        process.stop()


def post(port: int, head: bytes, body: Iterable[bytes]) -> bytes:
    """One request on a fresh socket, its body sent until the server answers; the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):  # the server may close once it has answered
            for piece in body:
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(piece)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
                if b"Request body too large" in answer:
                    break
        return answer


def pieces(total: int, chunked: bool) -> Iterator[bytes]:
    for _ in range(total // PIECE):
        yield b"%x\r\n%s\r\n" % (PIECE, b"x" * PIECE) if chunked else b"x" * PIECE
    if chunked:
        yield b"0\r\n\r\n"


def test_a_400_mb_body_is_refused_declared_or_chunked(agent: AgentProcess) -> None:
    before = agent.resident_bytes()
    head = b"POST /sync/push HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    head += f"X-MEMBRIDGE-AGENT: {KEY}\r\n".encode()
    declared = post(agent.port, head + f"Content-Length: {LARGE}\r\n\r\n".encode(),
                    pieces(LARGE, chunked=False))  # fmt: skip
    assert declared.startswith(b"HTTP/1.1 413"), declared[:300]
    assert declared.endswith(b'{"ok": false, "detail": "Request body too large"}')
    chunked = post(agent.port, head + b"Transfer-Encoding: chunked\r\n\r\n", pieces(LARGE, True))
    assert chunked.startswith(b"HTTP/1.1 413"), chunked[:300]
    assert chunked.endswith(b'{"ok": false, "detail": "Request body too large"}')
    assert agent.resident_bytes() - before < 64 * 1024 * 1024
    # and it serves on: a body within the limit is read
    small = httpx.post(f"{agent.url}/sync/push", json={}, headers={"X-MEMBRIDGE-AGENT": KEY})
    assert small.status_code == 422, small.text
    assert "Traceback" not in agent.log()
