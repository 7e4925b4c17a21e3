"""`bloom up`: what it starts and with which environment, and the real thing as a process:
ready, answering, a task end to end on the echo model, Ctrl-C leaves no process behind; a child
that fails, or dies later, stops the rest with a clear error."""

import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom.cli.supervisor import port_in_use
from bloom.cli.up import ADMIN_KEY_FILE, UpOptions, admin_key, banner, plan, port_problem
from bloom.worker.agents.claude import install as claude_cli
from bloom.worker.demo import DEMO_API_KEY, demo_clis
from tests.process.test_s3_artifacts import bloom
from tests.support.codex import codex_binary
from tests.support.gemini import gemini_binary
from tests.support.net import free_port
from tests.support.required import unavailable
from tests.support.s3 import Bucket

REPO = Path(__file__).resolve().parents[2]

# -- what it starts ------------------------------------------------------------------------------


def options(tmp_path: Path, **overrides: object) -> UpOptions:
    values: dict[str, object] = {
        "data_dir": tmp_path,
        "port": 5001,
        "membridge_port": 8001,
        "model_port": 8101,
        "worker_name": "w-test",
        "claude_bin": "/opt/claude",
    }
    return UpOptions(**(values | overrides))  # type: ignore[arg-type]


def test_admin_key_is_made_once_per_data_dir_and_private(tmp_path):
    key = admin_key(tmp_path / "data")
    path = tmp_path / "data" / ADMIN_KEY_FILE
    assert len(key) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert admin_key(tmp_path / "data") == key
    assert admin_key(tmp_path / "other") != key


def test_plan_without_the_demo_model(tmp_path):
    user_env = {
        "PATH": "/usr/bin",
        "ANTHROPIC_API_KEY": "sk-users-own",
        "MEMBRIDGE_ADMIN_KEY": "users-key",
        "BLOOM_MEMBRIDGE_ADMIN_KEY": "users-key-2",
        "DATABASE_URL": "postgresql://elsewhere/db",
    }
    children = plan(options(tmp_path, worker_concurrency=3), user_env, "the-key")
    assert [child.name for child in children] == ["membridge", "runtime", "worker"]
    membridge, runtime, worker = children
    for child in children:
        assert child.argv[:3] == [sys.executable, "-m", "bloom.cli.main"]
        assert child.env["BLOOM_DATA_DIR"] == str(tmp_path)
        assert child.env["MEMBRIDGE_ADMIN_KEY"] == "the-key"
        assert "BLOOM_MEMBRIDGE_ADMIN_KEY" not in child.env
        assert "DATABASE_URL" not in child.env
        assert child.env["BLOOM_LOG_FORMAT"] == "console"
    assert membridge.argv[3:] == ["membridge", "serve", "--host", "127.0.0.1", "--port", "8001"]
    assert membridge.env["BLOOM_MEMBRIDGE_DATABASE_URL"] == f"sqlite:///{tmp_path}/membridge.db"
    assert runtime.argv[3:] == ["runtime", "serve", "--host", "127.0.0.1", "--port", "5001"]
    assert runtime.env["BLOOM_DATABASE_URL"] == f"sqlite:///{tmp_path}/runtime.db"
    assert runtime.env["BLOOM_ARTIFACT_STORE"] == "fs"
    assert runtime.env["BLOOM_MEMBRIDGE_URL"] == "http://127.0.0.1:8001"
    assert worker.argv[3:] == ["worker", "run"]
    assert worker.env["BLOOM_RUNTIME_URL"] == "http://127.0.0.1:5001"
    assert worker.env["BLOOM_MEMBRIDGE_URL"] == "http://127.0.0.1:8001"
    assert worker.env["BLOOM_WORKER_CONCURRENCY"] == "3"
    assert worker.env["BLOOM_WORKER_NAME"] == "w-test"
    assert worker.env["BLOOM_CLAUDE_BIN"] == "/opt/claude"
    assert worker.env["ANTHROPIC_API_KEY"] == "sk-users-own"  # the user's own credentials
    assert "ANTHROPIC_BASE_URL" not in worker.env
    assert "BLOOM_CLAUDE_ARGS" not in worker.env


def test_plan_with_the_demo_model(tmp_path):
    user_env = {
        "ANTHROPIC_API_KEY": "sk-users-own",
        "CLAUDE_CODE_OAUTH_TOKEN": "oauth",
        "OPENAI_API_KEY": "sk-openai-own",
        "CODEX_API_KEY": "codex-own",
        "GEMINI_API_KEY": "gemini-own",
        "GOOGLE_API_KEY": "google-own",
    }
    children = plan(options(tmp_path, demo_model=True), user_env, "the-key")
    assert [child.name for child in children] == ["model", "membridge", "runtime", "worker"]
    model, worker = children[0], children[-1]
    assert model.argv[3:] == [
        "echo-model", "serve", "--host", "127.0.0.1", "--port", "8101",
        "--git-root", str(tmp_path / "demo-git"),
    ]  # fmt: skip
    assert "MEMBRIDGE_ADMIN_KEY" not in model.env
    assert worker.env["BLOOM_WORKER_ALLOW_CLONE"] == "true"  # the demo repository's tasks
    assert worker.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8101"
    assert worker.env["ANTHROPIC_API_KEY"] == DEMO_API_KEY
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in worker.env
    assert json.loads(worker.env["BLOOM_CLAUDE_ARGS"]) == ["--bare"]
    assert "BLOOM_WORKER_CONCURRENCY" not in worker.env
    assert {"OPENAI_API_KEY", "CODEX_API_KEY", "BLOOM_CODEX_BIN"}.isdisjoint(worker.env)
    assert {"GEMINI_API_KEY", "GOOGLE_API_KEY", "BLOOM_GEMINI_BIN"}.isdisjoint(worker.env)
    # with a Codex and a Gemini CLI, they are pointed at the echo model too
    with_others = options(
        tmp_path, demo_model=True, agent_bins={"codex": "/opt/codex", "gemini": "/opt/gemini"}
    )
    worker = plan(with_others, user_env, "the-key")[-1]
    assert worker.env["BLOOM_CODEX_BIN"] == "/opt/codex"
    assert worker.env["OPENAI_API_KEY"] == DEMO_API_KEY
    assert "CODEX_API_KEY" not in worker.env
    codex_args = " ".join(json.loads(worker.env["BLOOM_CODEX_ARGS"]))
    assert 'model_providers.echo.base_url="http://127.0.0.1:8101/v1"' in codex_args
    assert 'model_provider="echo"' in codex_args
    assert worker.env["BLOOM_GEMINI_BIN"] == "/opt/gemini"
    assert worker.env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8101"
    assert worker.env["GEMINI_API_KEY"] == DEMO_API_KEY
    assert "GOOGLE_API_KEY" not in worker.env
    assert worker.env["GEMINI_CLI_HOME"] == str(tmp_path / "gemini-home")


def test_the_demo_finds_the_other_clis_as_the_worker_would(tmp_path):
    caches = {"BLOOM_CODEX_CACHE": str(tmp_path), "BLOOM_GEMINI_CACHE": str(tmp_path)}
    nowhere = caches | {"PATH": str(tmp_path)}
    assert demo_clis(nowhere) == {}
    codex = tmp_path / "bin" / "codex"
    codex.parent.mkdir()
    codex.write_text("#!/bin/sh\n")
    codex.chmod(0o755)
    assert demo_clis(nowhere | {"PATH": str(codex.parent)}) == {"codex": str(codex)}


def test_the_banner_says_where_everything_is(tmp_path):
    project = "demo, http://127.0.0.1:8101/git/demo.git (tasks that change it: --repo demo)"
    text = "\n".join(banner(options(tmp_path, demo_model=True, worker_concurrency=2), project))
    assert f"  project    {project}" in text
    try_it = 'submit --repo demo "add a hello.txt saying hi" --wait --url http://127.0.0.1:5001'
    assert try_it in text
    assert "dashboard  http://127.0.0.1:5001/" in text
    assert "runtime    http://127.0.0.1:5001" in text
    assert "API docs   http://127.0.0.1:5001/api/docs" in text
    assert "model      http://127.0.0.1:8101" in text
    assert "worker     w-test (concurrency 2), claude at /opt/claude" in text
    assert f"data dir   {tmp_path}" in text
    assert 'bloom task submit "hello" --wait --url http://127.0.0.1:5001' in text
    assert "codex" not in text
    with_others = options(
        tmp_path, demo_model=True, agent_bins={"codex": "/opt/codex", "gemini": "/opt/gemini"}
    )
    text = "\n".join(banner(with_others))
    assert "claude at /opt/claude, codex at /opt/codex, gemini at /opt/gemini" in text
    assert 'bloom task submit --cli codex "hello" --wait --url http://127.0.0.1:5001' in text
    assert 'bloom task submit --cli gemini "hello" --wait --url http://127.0.0.1:5001' in text
    default_port = "\n".join(banner(options(tmp_path, port=5000)))
    assert default_port.endswith('bloom task submit "hello" --wait\n  stop       Ctrl-C')
    assert "model" not in default_port


# -- the real thing ------------------------------------------------------------------------------


class Up:
    """`bloom up` as a child process; its stdout and stderr collected by threads."""

    def __init__(self, tmp_path: Path, *args: str, **env: str):
        """`--port P` among `args`: the other ports follow it, else each is given, free."""
        self.data_dir = tmp_path / "data"
        self.port, self.membridge_port, self.model_port = free_port(), free_port(), free_port()
        ports = ["--port", str(self.port), "--membridge-port", str(self.membridge_port),
                 "--model-port", str(self.model_port)]  # fmt: skip
        if "--port" in args:
            self.port = int(args[args.index("--port") + 1])
            self.membridge_port, self.model_port = self.port + 3000, self.port + 3050
            ports = []
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("BLOOM_", "MEMBRIDGE_", "ANTHROPIC_"))
            and k not in ("RUNTIME_API_KEY", "DATABASE_URL")
        }
        argv = [
            sys.executable, "-m", "bloom.cli.main", "up", *args,
            *ports,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            env=base | {"BLOOM_DATA_DIR": str(self.data_dir), "COLUMNS": "200"} | env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err)):
            threading.Thread(target=self._collect, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _collect(stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(line.rstrip("\n"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return "\n".join(self.out) + "\n--- stderr ---\n" + "\n".join(self.err)

    def wait_for(self, needle: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.out + self.err):
            if self.process.poll() is not None:
                time.sleep(0.3)  # let the readers catch up
                if any(needle in line for line in self.out + self.err):
                    return
                raise AssertionError(f"bloom up exited before {needle!r}:\n{self.text()}")
            assert time.monotonic() < deadline, f"no {needle!r} in time:\n{self.text()}"
            time.sleep(0.1)

    def children(self) -> dict[str, int]:
        """name → pid, from its `started <name> (pid N)` lines."""
        found = (re.search(r"started (\w+) \(pid (\d+)\)", line) for line in self.err)
        return {m.group(1): int(m.group(2)) for m in found if m}

    def finish(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout)
        time.sleep(0.2)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        for pid in self.children().values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def gone(pid: int) -> bool:
    """Neither the process nor anything else in its process group is left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        return False
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def claude_bin() -> str:
    """The real Claude CLI: on PATH or in the project cache (`.ci/run` puts it there)."""
    found = claude_cli.find_claude(REPO / claude_cli.DEFAULT_CACHE_DIR)
    if found is None:
        unavailable("the Claude CLI (`bloom claude install` fetches it into .cache/claude-cli)")
    return str(found)


@pytest.fixture
def started() -> Iterator[list[Up]]:
    ups: list[Up] = []
    yield ups
    for up in ups:
        up.kill()


def test_up_with_the_demo_model_runs_a_task_and_ctrl_c_leaves_nothing(
    tmp_path, claude_bin, started
):
    # with them, a Codex and a Gemini task too (`bloom agents install codex`, `… gemini`)
    others = {"codex": codex_binary(), "gemini": gemini_binary()}
    with_others: dict[str, str] = {"CODEX_HOME": str(tmp_path)}  # the demo makes Gemini's
    for name, binary in others.items():
        if binary is not None:
            with_others[f"BLOOM_{name.upper()}_BIN"] = str(binary)
    up = Up(tmp_path, "--demo-model", BLOOM_CLAUDE_BIN=claude_bin, **with_others)
    started.append(up)
    up.wait_for("BLOOM is up")
    children = up.children()
    assert set(children) == {"model", "membridge", "runtime", "worker"}
    assert list(children) == ["model", "membridge", "runtime", "worker"]  # in this order
    assert httpx.get(f"{up.url}/api/runtime/health").json()["status"] == "ok"
    assert httpx.get(f"http://127.0.0.1:{up.membridge_port}/health").status_code == 200
    assert any(line.startswith("runtime   | ") for line in up.out)
    assert any(line.startswith("membridge | ") for line in up.out)
    assert any(line.startswith("worker    | ") for line in up.out)
    assert any(line.startswith("model     | ") for line in up.out)
    assert f"  runtime    {up.url}" in up.out

    client_env = {"BLOOM_RUNTIME_URL": up.url}
    done = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "task", "submit", "hello", "--wait"],
        env={k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "RUNTIME_"))}
        | {"BLOOM_RUNTIME_URL": up.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + up.text()
    assert done.stdout == "echo: hello\n"
    assert "echo: hello" in done.stderr  # the live output, as it came
    for name in (name for name, binary in others.items() if binary is not None):
        by_other = bloom(
            "task", "submit", "--cli", name, "hello", "--wait", env=client_env, cwd=tmp_path
        )
        assert by_other.returncode == 0, by_other.stderr + up.text()
        assert by_other.stdout == "echo: hello\n"

    # the demo repository, served by the echo model, is a managed project a task can change
    changed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bloom.cli.main",
            "task",
            "submit",
            "--repo",
            "demo",
            "add a hello.txt saying hi",
            "--wait",
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "RUNTIME_"))}
        | {"BLOOM_RUNTIME_URL": up.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert changed.returncode == 0, changed.stderr + up.text()
    assert "+++ b/hello.txt" in changed.stdout
    assert "+hi" in changed.stdout
    served = up.data_dir / "demo-git" / "demo.git"  # pushed to the demo's remote
    [branch] = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname)", "refs/heads/bloom"],
        cwd=served, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    shown = subprocess.run(
        ["git", "show", f"{branch}:hello.txt"], cwd=served, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert shown.stdout == "hi\n"

    key_file = up.data_dir / ADMIN_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip() not in up.text()
    assert (up.data_dir / "runtime.db").exists()
    assert (up.data_dir / "membridge.db").exists()
    assert any((up.data_dir / "artifacts").rglob("*"))

    up.process.send_signal(signal.SIGINT)
    assert up.finish() == 0, up.text()
    for name, pid in children.items():
        assert gone(pid), f"{name} (pid {pid}) is still there"
    stops = [line for line in up.err if line.startswith("stopping ")]
    assert [line.split()[1] for line in stops] == ["worker", "runtime", "membridge", "model"]


def test_bloom_up_with_minio_settings_keeps_artifacts_in_the_bucket(
    tmp_path,
    claude_bin,
    started,
    s3_bucket: Bucket,
):
    up = Up(tmp_path, "--demo-model", BLOOM_CLAUDE_BIN=claude_bin, **s3_bucket.env())
    started.append(up)
    up.wait_for("BLOOM is up")
    client_env = {"BLOOM_RUNTIME_URL": up.url}
    done = bloom("task", "submit", "hello bucket", "--wait", env=client_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + up.text()
    assert done.stdout == "echo: hello bucket\n"

    [artifact] = httpx.get(f"{up.url}/api/runtime/artifacts").json()
    assert artifact["storage"] == "s3"
    assert artifact["url"].startswith(f"s3://{s3_bucket.name}/artifacts/sha256/")
    assert not any((up.data_dir / "artifacts").rglob("*"))

    printed = bloom("artifact", "get", artifact["id"], env=client_env, cwd=tmp_path)
    assert (printed.returncode, printed.stdout) == (0, "echo: hello bucket"), printed.stderr
    saved = bloom("artifact", "get", artifact["id"], "-o", "out.txt", env=client_env, cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "out.txt").read_text() == "echo: hello bucket"
    missing = bloom("artifact", "get", "no-such-id", "-o", "x.txt", env=client_env, cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "bloom: not found: Artifact not found"
    assert not (tmp_path / "x.txt").exists()


def test_a_child_that_fails_to_start_stops_the_others_and_says_why(tmp_path, started):
    up = Up(
        tmp_path,
        "--demo-model",
        BLOOM_CLAUDE_BIN="/bin/true",
        BLOOM_MEMBRIDGE_DB_POOL_SIZE="0",  # membridge refuses this setting at start
    )
    started.append(up)
    assert up.finish(120) == 1, up.text()
    children = up.children()
    assert set(children) == {"model", "membridge"}
    assert all(gone(pid) for pid in children.values())
    errors = "\n".join(up.err)
    assert "bloom up: membridge exited with status 2 before it was ready" in errors
    assert "BLOOM_MEMBRIDGE_DB_POOL_SIZE" in errors  # its own last lines say why
    assert "Traceback" not in errors


def test_a_child_that_dies_later_stops_the_others(tmp_path, started):
    up = Up(tmp_path, BLOOM_CLAUDE_BIN="/bin/true")
    started.append(up)
    up.wait_for("BLOOM is up")
    children = up.children()
    assert set(children) == {"membridge", "runtime", "worker"}
    os.kill(children["runtime"], signal.SIGKILL)
    assert up.finish() == 1, up.text()
    assert all(gone(pid) for pid in children.values())
    assert "bloom up: runtime was killed by signal SIGKILL unexpectedly" in "\n".join(up.err)


def wait_gone(children: dict[str, int], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while left := {name: pid for name, pid in children.items() if not gone(pid)}:
        assert time.monotonic() < deadline, f"still running: {left}"
        time.sleep(0.1)


def test_bloom_up_killed_with_sigkill_leaves_no_child(tmp_path, started):
    """Each child watches a pipe only bloom up holds open: SIGKILL closes it, and they stop."""
    up = Up(tmp_path, BLOOM_CLAUDE_BIN="/bin/true")
    started.append(up)
    up.wait_for("BLOOM is up")
    children = up.children()
    assert set(children) == {"membridge", "runtime", "worker"}
    up.process.kill()
    wait_gone(children)
    assert not port_in_use(up.port)
    assert not port_in_use(up.membridge_port)


def test_ports_in_use_are_refused_before_anything_starts(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        argv = [sys.executable, "-m", "bloom.cli.main", "up", "--port", str(port),
                "--membridge-port", str(free_port())]  # fmt: skip
        done = subprocess.run(
            argv,
            env=os.environ | {"BLOOM_DATA_DIR": str(tmp_path), "BLOOM_CLAUDE_BIN": "/bin/true"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert f"runtime port {port} already in use" in done.stderr
    assert "started" not in done.stderr


def test_the_other_ports_follow_the_runtimes_and_a_clash_is_named(tmp_path):
    at_5100 = options(tmp_path, port=5100, membridge_port=8100, model_port=8150, demo_model=True)
    assert port_problem(at_5100) is None
    same = options(tmp_path, port=5100, membridge_port=5100)
    assert port_problem(same) == (
        "runtime port 5100 and membridge port 5100 are the same: they must differ; "
        "choose another with --membridge-port"
    )
    high = options(tmp_path, port=65000, membridge_port=68000, demo_model=True)
    assert port_problem(high, ["membridge"]) == (
        "membridge port 68000 (--port + 3000) is past 65535: choose a lower --port or "
        "--membridge-port"
    )


def stack_ports() -> int:
    """A runtime port P with P - 3000, P, P + 3000 and P + 3050 all free."""
    while True:
        port = free_port()
        if not any(port_in_use(port + offset) for offset in (-3000, 0, 3000, 3050)):
            return port


def test_a_stack_moved_with_port_and_a_second_one_that_clashes_with_it(
    tmp_path, claude_bin, started
):
    port = stack_ports()
    up = Up(tmp_path, "--demo-model", "--port", str(port), BLOOM_CLAUDE_BIN=claude_bin)
    started.append(up)
    up.wait_for("BLOOM is up")
    assert httpx.get(f"http://127.0.0.1:{port}/api/runtime/health").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port + 3000}/health").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port + 3050}/_requests").status_code == 200
    assert f"  membridge  http://127.0.0.1:{port + 3000}" in up.out

    def second(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bloom.cli.main", "up", "--demo-model", *args],
            env=os.environ
            | {"BLOOM_DATA_DIR": str(tmp_path / "second"), "BLOOM_CLAUDE_BIN": "/bin/true"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    below = second("--port", str(port - 3000))  # its Membridge would sit on our runtime's port
    assert below.returncode == 2, below.stderr
    assert below.stderr.splitlines() == [
        f"bloom: membridge port {port} (--port + 3000) already in use (another `bloom up`?): "
        "move the whole stack with --port (`make demo PORT=5100`), or choose another with "
        "--membridge-port"
    ]
    same = second("--port", str(port), "--membridge-port", str(free_port()))
    assert same.returncode == 2, same.stderr
    assert f"runtime port {port} already in use" in same.stderr
    assert f"model port {port + 3050} (--port + 3050)" in same.stderr
    assert "started" not in below.stderr + same.stderr
