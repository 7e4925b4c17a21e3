"""`bloom up`: the whole local stack in one command.

In order, each ready before the next: [the echo model, with --demo-model] → `bloom membridge
serve` → `bloom runtime serve` → `bloom worker run`. Everything lives under one data dir
(BLOOM_DATA_DIR, default ./.bloom): both SQLite databases, artifact files, the worker's state and
the Membridge admin key, made once and kept in `membridge-admin.key` (mode 0600), never printed.
The supervision itself (process groups, output, stopping) is `bloom.cli.supervisor`'s.
"""

import os
import secrets
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

import click
import typer

from bloom.cli.output import fail, say
from bloom.cli.supervisor import (
    Child,
    ChildFailed,
    ChildSpec,
    Ready,
    StopRequested,
    Supervisor,
    describe_exit,
    http_ready,
    port_in_use,
)
from bloom.worker.agents.claude import credentials
from bloom.worker.agents.claude import install as claude_cli
from bloom.worker.agents.claude.env import child_environment
from bloom.worker.demo import DEMO_REPO, demo_clis, demo_environment, other_clis_environment

HOST = "127.0.0.1"
DEMO_GIT_DIR = "demo-git"
"""Under the data dir: the repositories the echo model serves (`demo.git`)."""
ADMIN_KEY_FILE = "membridge-admin.key"
# Unless given, Membridge and the echo model sit at fixed offsets from the runtime's port (5000 →
# 8000 and 8050), so `--port` moves the whole stack and stacks 100 apart do not meet.
MEMBRIDGE_OFFSET = 3000
MODEL_OFFSET = 3050
PORT_OPTIONS = {"runtime": "--port", "membridge": "--membridge-port", "model": "--model-port"}
WORKER_DRAIN_SEC = "5"  # Ctrl-C gives running tasks this long, within the 10 s stop grace
# Set by us for the children; the user's own values would point them elsewhere.
OVERRIDDEN = (
    "BLOOM_MEMBRIDGE_ADMIN_KEY",
    "MEMBRIDGE_SERVER_ADMIN_KEY",
    "MEMBRIDGE_ADMIN_KEY",
    "MEMBRIDGE_SERVER_URL",
    "DATABASE_URL",
    "MEMBRIDGE_DEV",
)


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    port: int = 5000
    membridge_port: int = 5000 + MEMBRIDGE_OFFSET
    model_port: int = 5000 + MODEL_OFFSET
    demo_model: bool = False
    worker_concurrency: int | None = None
    worker_name: str = "worker"
    claude_bin: str = "claude"
    agent_bins: Mapping[str, str] = field(default_factory=dict)
    """The CLIs besides Claude (name → binary) the demo's worker runs against the echo model
    (those this machine has; none without --demo-model)."""

    @property
    def runtime_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def membridge_url(self) -> str:
        return f"http://{HOST}:{self.membridge_port}"

    @property
    def model_url(self) -> str:
        return f"http://{HOST}:{self.model_port}"

    def ports(self) -> dict[str, int]:
        named = {"runtime": self.port, "membridge": self.membridge_port}
        return ({"model": self.model_port} if self.demo_model else {}) | named


def port_problem(options: UpOptions, derived: Iterable[str] = ()) -> str | None:
    """One line saying which port cannot be used and how to choose another; None when all can.
    `derived`: the services whose port came from `--port` rather than their own option."""
    ports = options.ports()
    derived = set(derived)

    def named(name: str) -> str:
        offset = {"membridge": MEMBRIDGE_OFFSET, "model": MODEL_OFFSET}.get(name)
        origin = f" (--port + {offset})" if name in derived and offset else ""
        return f"{name} port {ports[name]}{origin}"

    for name, port in ports.items():
        if port > 65535:
            return f"{named(name)} is past 65535: choose a lower --port or {PORT_OPTIONS[name]}"
    names = list(ports)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if ports[first] == ports[second]:
                return (
                    f"{named(first)} and {named(second)} are the same: they must differ; "
                    f"choose another with {PORT_OPTIONS[second]}"
                )
    busy = [name for name, port in ports.items() if port_in_use(port, HOST)]
    if not busy:
        return None
    choices = " / ".join(PORT_OPTIONS[name] for name in busy)
    return (
        f"{', '.join(map(named, busy))} already in use (another `bloom up`?): move the whole "
        f"stack with --port (`make demo PORT=5100`), or choose another with {choices}"
    )


def admin_key(data_dir: Path) -> str:
    """The data dir's Membridge admin key, made on first use (a file only its owner reads)."""
    path = data_dir / ADMIN_KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if key:
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
            return key
        path.unlink()
        return admin_key(data_dir)
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bloom.cli.main", *args]


def _runtime_key(environ: Mapping[str, str]) -> str:
    return environ.get("BLOOM_API_KEY") or environ.get("RUNTIME_API_KEY") or ""


def worker_ready(runtime_url: str, name: str, since_ms: int, api_key: str = "") -> Ready:
    """Ready when the runtime lists the worker online, registered since `since_ms`."""
    import httpx  # only `bloom up` waits on children: not imported by `--help`

    headers = {"X-Runtime-API-Key": api_key} if api_key else {}

    def check() -> bool:
        try:
            response = httpx.get(
                f"{runtime_url}/api/runtime/workers/{name}", headers=headers, timeout=2.0
            )
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        worker = response.json()
        heard = worker.get("last_heartbeat") or 0
        return bool(worker.get("status") == "online" and heard >= since_ms)

    return check


def _object_store_set(environ: Mapping[str, str]) -> bool:
    """MINIO_ENDPOINT (or BLOOM_S3_ENDPOINT) given: artifacts go to that bucket, else to files."""
    return bool(environ.get("BLOOM_S3_ENDPOINT") or environ.get("MINIO_ENDPOINT"))


def plan(options: UpOptions, environ: Mapping[str, str], key: str) -> list[ChildSpec]:
    """The children of `bloom up`, in start order, with their environments."""
    data = options.data_dir
    base = {name: value for name, value in environ.items() if name not in OVERRIDDEN}
    base |= {"BLOOM_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1"}
    base.setdefault("BLOOM_LOG_FORMAT", "console")  # people read this output
    with_key = base | {"MEMBRIDGE_ADMIN_KEY": key}
    children = []
    if options.demo_model:
        children.append(
            ChildSpec(
                "model",
                _command(
                    "echo-model",
                    "serve",
                    "--host",
                    HOST,
                    "--port",
                    str(options.model_port),
                    "--git-root",
                    str(data / DEMO_GIT_DIR),
                ),
                base,
                http_ready(f"{options.model_url}/_requests"),
                ready_timeout_sec=30,
                colour="magenta",
            )
        )
    membridge_env = with_key | {"BLOOM_MEMBRIDGE_DATABASE_URL": f"sqlite:///{data}/membridge.db"}
    children.append(
        ChildSpec(
            "membridge",
            _command("membridge", "serve", "--host", HOST, "--port", str(options.membridge_port)),
            membridge_env,
            http_ready(f"{options.membridge_url}/health"),
            colour="cyan",
        )
    )
    runtime_env = with_key | {
        "BLOOM_DATABASE_URL": f"sqlite:///{data}/runtime.db",
        "BLOOM_ARTIFACT_STORE": "s3" if _object_store_set(environ) else "fs",
        "BLOOM_ARTIFACT_DIR": str(data / "artifacts"),
        "BLOOM_MEMBRIDGE_URL": options.membridge_url,
    }
    children.append(
        ChildSpec(
            "runtime",
            _command("runtime", "serve", "--host", HOST, "--port", str(options.port)),
            runtime_env,
            http_ready(f"{options.runtime_url}/api/runtime/health"),
            colour="green",
        )
    )
    worker_env = with_key | {
        "BLOOM_RUNTIME_URL": options.runtime_url,
        "BLOOM_MEMBRIDGE_URL": options.membridge_url,
        "BLOOM_WORKER_NAME": options.worker_name,
        "BLOOM_CLAUDE_BIN": options.claude_bin,
    }
    worker_env.setdefault("BLOOM_WORKER_DRAIN_TIMEOUT_SEC", WORKER_DRAIN_SEC)
    if options.worker_concurrency is not None:
        worker_env["BLOOM_WORKER_CONCURRENCY"] = str(options.worker_concurrency)
    if options.demo_model:  # the user's real credentials stay home; the demo repository's tasks
        worker_env = demo_environment(worker_env, options.model_url) | other_clis_environment(
            options.agent_bins, options.model_url, options.data_dir
        )
        worker_env["BLOOM_WORKER_ALLOW_CLONE"] = "true"
    since_ms = time.time_ns() // 1_000_000
    children.append(
        ChildSpec(
            "worker",
            _command("worker", "run"),
            worker_env,
            worker_ready(options.runtime_url, options.worker_name, since_ms, _runtime_key(environ)),
            colour="yellow",
        )
    )
    return children


def demo_project(options: UpOptions) -> str:
    """The demo repository as the managed project `demo` (made once; kept in the database)."""
    import httpx

    body = {"name": DEMO_REPO, "repo_url": f"{options.model_url}/git/{DEMO_REPO}.git"}
    key = _runtime_key(os.environ)
    headers = {"X-Runtime-API-Key": key} if key else {}
    try:
        made = httpx.post(
            f"{options.runtime_url}/api/runtime/projects", json=body, headers=headers, timeout=10
        )
    except httpx.HTTPError as exc:
        return f"the demo project could not be made: {exc}"
    if made.status_code in (201, 409):
        return f"{DEMO_REPO}, {body['repo_url']} (tasks that change it: --repo {DEMO_REPO})"
    return f"the demo project could not be made: {made.status_code} {made.text[:200]}"


def banner(options: UpOptions, project: str | None = None) -> list[str]:
    """What `bloom up` says once everything is up (`project`: the demo project's line)."""
    lines = [
        click.style("BLOOM is up", bold=True),
        f"  dashboard  {options.runtime_url}/",
        f"  runtime    {options.runtime_url}",
        f"  API docs   {options.runtime_url}/api/docs",
        f"  membridge  {options.membridge_url}",
    ]
    if options.demo_model:
        lines.append(f"  model      {options.model_url} (demo: answers every prompt with its echo)")
    if project is not None:
        lines.append(f"  project    {project}")
    concurrency = (
        f" (concurrency {options.worker_concurrency})" if options.worker_concurrency else ""
    )
    url_option = "" if options.port == 5000 else f" --url {options.runtime_url}"
    others = "".join(f", {name} at {binary}" for name, binary in options.agent_bins.items())
    lines += [
        f"  worker     {options.worker_name}{concurrency}, claude at {options.claude_bin}{others}",
        f"  data dir   {options.data_dir}",
        f'  try        bloom task submit "hello" --wait{url_option}',
        *(
            [
                f"             bloom task submit --repo {DEMO_REPO} "
                f'"add a hello.txt saying hi" --wait{url_option}'
            ]
            if options.demo_model
            else []
        ),
        *(
            f'             bloom task submit --cli {name} "hello" --wait{url_option}'
            for name in options.agent_bins
        ),
        "  stop       Ctrl-C",
    ]
    return lines


def up(
    demo_model: Annotated[
        bool,
        typer.Option(
            "--demo-model",
            help="Start the echo model and point the worker's Claude CLI (and its Codex and "
            "Gemini CLIs, when this machine has them) at it: no API key needed, every answer is "
            "`echo: <prompt>`.",
        ),
    ] = False,
    port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, help="Runtime port; the others follow it unless given (5000)."
        ),
    ] = 5000,
    membridge_port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help=f"Membridge port [--port + {MEMBRIDGE_OFFSET}]"),
    ] = None,
    model_port: Annotated[
        int | None,
        typer.Option(
            min=1, max=65535, help=f"Echo model port, with --demo-model [--port + {MODEL_OFFSET}]"
        ),
    ] = None,
    worker_concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, max=32, help="Tasks the worker runs at once (env BLOOM_WORKER_CONCURRENCY; 1)"
        ),
    ] = None,
) -> None:
    """Start the local stack: Membridge, the runtime and a worker (and the echo model with
    --demo-model), on SQLite under BLOOM_DATA_DIR (./.bloom). Ctrl-C stops it all."""
    from bloom.worker.settings import default_worker_name

    environ = dict(os.environ)
    data_dir = Path(environ.get("BLOOM_DATA_DIR") or ".bloom").resolve()
    options = UpOptions(
        data_dir=data_dir,
        port=port,
        membridge_port=port + MEMBRIDGE_OFFSET if membridge_port is None else membridge_port,
        model_port=port + MODEL_OFFSET if model_port is None else model_port,
        demo_model=demo_model,
        worker_concurrency=worker_concurrency,
        worker_name=environ.get("BLOOM_WORKER_NAME")
        or environ.get("MEMBRIDGE_NODE_ID")
        or default_worker_name(),
    )
    given = {"membridge": membridge_port, "model": model_port}
    if problem := port_problem(options, [name for name, at in given.items() if at is None]):
        fail(problem, 2)
    try:
        claude_bin, fetched = claude_cli.ensure_claude(say, environ)
    except claude_cli.ClaudeCliError as exc:
        fail(str(exc), 2)
    except KeyboardInterrupt:
        fail("interrupted while fetching the Claude CLI", 130)
    if not fetched:
        say(click.style(f"Claude CLI: {claude_bin}", dim=True))
    options = replace(
        options, claude_bin=claude_bin, agent_bins=demo_clis(environ) if demo_model else {}
    )
    if not demo_model:  # the echo model's key is the demo's credentials
        missing = credentials.probe(claude_bin, child_environment(environ, "default"))
        if missing:
            say(click.style(f"warning: {missing}", fg="yellow"))
    key = admin_key(data_dir)
    raise typer.Exit(run_stack(options, plan(options, environ, key)))


def run_stack(options: UpOptions, children: list[ChildSpec]) -> int:
    """Start `children` in order, wait, stop; the exit status. However this ends (a stop, a
    child failing, lost output, an error of ours), the children are stopped on the way out; if
    this process is killed, by their lifeline."""
    supervisor = Supervisor(say=say)
    failed: ChildFailed | None = None
    died: Child | None = None
    with supervisor.signals():
        try:
            for spec in children:
                supervisor.start(spec)
            project = demo_project(options) if options.demo_model else None
            for line in banner(options, project):
                supervisor.show(line)
            died = supervisor.wait()
        except StopRequested:
            pass
        except ChildFailed as exc:
            failed = exc
        finally:
            supervisor.stop_all()
    if failed is not None:
        _report(failed.name, failed.reason, failed.tail)
        return 1
    if died is not None:
        _report(
            died.name, f"{describe_exit(died)} unexpectedly; the others were stopped", died.tail
        )
        return 1
    supervisor.say("stopped")
    return 0


def _report(name: str, reason: str, tail: Iterable[str]) -> None:
    typer.secho(f"bloom up: {name} {reason}", err=True, fg=typer.colors.RED, bold=True)
    lines = list(tail)
    if lines:
        typer.echo(f"its last lines ({name}):", err=True)
        for line in lines[-10:]:
            typer.echo(f"  {line}", err=True)
