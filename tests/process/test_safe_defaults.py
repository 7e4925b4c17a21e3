"""Safe defaults, on real server processes: neither server listens beyond loopback without its
key unless told `--insecure` (then it says so, in its log and its health), and the body limit
holds on a real socket (declared or chunked, and the server serves on)."""

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.databases import fresh_sqlite_url
from tests.support.membridge import MembridgeProcess, membridge_env
from tests.support.server import RuntimeProcess

API_KEY = "rt-key-0123456789"


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    return fresh_sqlite_url(sqlite_template, tmp_path)


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_runtime_refuses_to_listen_openly_without_a_key(
    sqlite_url: str, tmp_path: Path
) -> None:
    env = RuntimeProcess(sqlite_url, tmp_path).environment()
    for host in ("0.0.0.0", "10.1.2.3", "example.org"):
        done = run(["runtime", "serve", "--host", host, "--port", "1"], env, tmp_path)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"bloom: refusing to listen on {host} without an API key")
        assert "--insecure" in line


def test_the_runtime_refuses_to_serve_a_reverse_proxy_without_a_key(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Behind nginx the runtime listens on loopback, yet whoever reaches nginx reaches it."""
    env = RuntimeProcess(sqlite_url, tmp_path).environment() | {
        "BLOOM_TRUSTED_PROXIES": "127.0.0.1"
    }
    done = run(["runtime", "serve", "--port", "1"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bloom: refusing to serve behind a reverse proxy (BLOOM_TRUSTED_")
    assert "--insecure" in line


@pytest.fixture
def insecure_runtime(sqlite_url: str, tmp_path: Path) -> Iterator[RuntimeProcess]:
    process = RuntimeProcess(sqlite_url, tmp_path)
    process.start("--host", "0.0.0.0", "--insecure")
    yield process
    process.stop()


def test_insecure_says_so_in_the_log_and_the_health(insecure_runtime: RuntimeProcess) -> None:
    health = httpx.get(f"{insecure_runtime.url}/api/runtime/health").json()
    assert health["insecure"] is True
    assert "anyone who can reach this server" in health["warning"]
    assert "runtime_insecure" in insecure_runtime.log()


def test_with_a_key_the_runtime_listens_anywhere_and_is_not_insecure(
    sqlite_url: str, tmp_path: Path
) -> None:
    process = RuntimeProcess(sqlite_url, tmp_path, RUNTIME_API_KEY=API_KEY)
    process.start("--host", "0.0.0.0")
    try:
        health = httpx.get(f"{process.url}/api/runtime/health").json()
        assert "insecure" not in health
        assert "runtime_insecure" not in process.log()
    finally:
        process.stop()


def test_membridge_in_dev_mode_stays_on_loopback_unless_insecure(tmp_path: Path) -> None:
    env = membridge_env(tmp_path, MEMBRIDGE_DEV="1")
    done = run(["membridge", "serve", "--host", "0.0.0.0", "--port", "1"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bloom: refusing to listen on 0.0.0.0 without an admin key")
    process = MembridgeProcess(tmp_path, admin_key=None, MEMBRIDGE_DEV="1", BLOOM_INSECURE="true")
    process.start("--host", "0.0.0.0")
    try:
        health = httpx.get(f"{process.url}/health").json()
        assert health["insecure"] is True
        assert health["auth"] == "disabled"
        assert "anyone who can reach this server" in health["warning"]
    finally:
        process.stop()
    # on loopback, dev mode needs nothing more, and health says nothing of insecurity
    local = MembridgeProcess(tmp_path, admin_key=None, MEMBRIDGE_DEV="1")
    local.start()
    try:
        assert "insecure" not in httpx.get(f"{local.url}/health").json()
    finally:
        local.stop()


def raw_post(port: int, head: bytes, body: bytes) -> bytes:
    """One request on a fresh socket; what the server answers before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):  # the server may close once it has answered
            sock.sendall(body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and b"Request body too large" in answer:
                break
        return answer


def test_the_body_limit_on_a_real_socket(sqlite_url: str, tmp_path: Path) -> None:
    process = RuntimeProcess(sqlite_url, tmp_path, BLOOM_MAX_BODY_BYTES="65536")
    process.start()
    try:
        big = b'{"context_id":"c","agent_slug":"a","prompt":"' + b"x" * 1_000_000 + b'"}'
        path = b"POST /api/runtime/llm-tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        path += b"Content-Type: application/json\r\n"
        declared = path + f"Content-Length: {len(big)}\r\n\r\n".encode()
        answer = raw_post(process.port, declared, big)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        chunked = path + b"Transfer-Encoding: chunked\r\n\r\n"
        pieces = b"".join(
            f"{len(big[i : i + 8192]):x}\r\n".encode() + big[i : i + 8192] + b"\r\n"
            for i in range(0, len(big), 8192)
        )
        answer = raw_post(process.port, chunked, pieces + b"0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # and it serves on
        ok = httpx.post(
            f"{process.url}/api/runtime/llm-tasks",
            json={"context_id": "c", "agent_slug": "a", "prompt": "hi"},
        )
        assert ok.status_code == 201, ok.text
        assert "Traceback" not in process.log()
    finally:
        process.stop()
