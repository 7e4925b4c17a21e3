"""Worker-overhead mode: what a real worker adds to each task beyond its Claude CLI's own run
(issue 19, item 5).

The bench starts its own runtime, the echo model (the loopback stand-in for Anthropic's API that
`bloom up --demo-model` and the tests use) and one real `bloom worker run` whose Claude CLI talks
to that model, as `bloom up --demo-model` sets it up. Then, `warmup` untimed rounds and `tasks`
timed ones, one at a time, so nothing ever queues:

1. the bench runs the CLI itself exactly as the worker would (same argv, environment, kind of
   working directory and prompt) and times it from spawn to exit: the CLI *alone*;
2. it creates a task, which the worker's waiting claim takes at once, and follows the task's
   events until it ends;
3. from what the runtime recorded, nothing added for the bench: the *span*, from the lease's
   grant (the claim answered) to its end (the complete accepted), on the runtime's clock; and
   the CLI's run *as the worker timed it* (spawn to exit: the `duration_ms` of the attempt's
   `finished` event, which its result's metrics carry too).

The worker's overhead per task is the span less the CLI's run as the worker timed it. The span
less the CLI alone's run of the same round says the same from outside the worker (its spawn of
the CLI included), but carries the CLI's own spread from one run to the next. The runtime and the
worker count whole milliseconds, so each per-task figure is good to a millisecond or two.
"""

import asyncio
import contextlib
import os
import shutil
import signal
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from bloom.bench.api import TASK_AGENT, TASK_PROMPT, RuntimeApi, Tally
from bloom.bench.http import Endpoint
from bloom.bench.server import ModeUsageError, OwnProcess, answers, free_port, own_runtime
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import print_errors
from bloom.worker.agents.claude.env import child_environment
from bloom.worker.agents.claude.install import configured_claude, find_claude
from bloom.worker.agents.claude.invocation import Invocation
from bloom.worker.agents.environment import without_secrets
from bloom.worker.demo import DEMO_CLAUDE_ARGS, demo_environment

CLI_TIMEOUT_SEC = 120
READY_SEC = 60.0


class OverheadUsageError(ModeUsageError):
    """Options that do not go together, or no Claude CLI to run."""


@dataclass(frozen=True, slots=True)
class OverheadOptions:
    tasks: int = 20
    warmup: int = 2
    """Rounds run first and not counted (the CLI's and the worker's first runs)."""
    database_url: str | None = None
    claude_bin: str | None = None
    """Default: BLOOM_CLAUDE_BIN, else `claude` on PATH, else the project's cache."""


@dataclass(slots=True)
class OverheadReport:
    options: OverheadOptions
    storage: str
    claude: str
    claude_version: str = "?"
    span: Latency = field(default_factory=lambda: Latency.of([]))
    """The lease's grant to its end: the claim answered to the complete accepted."""
    cli_in_worker: Latency = field(default_factory=lambda: Latency.of([]))
    """The CLI's run, spawn to exit, as the worker timed it."""
    overhead: Latency = field(default_factory=lambda: Latency.of([]))
    """Per task: the span less the CLI's run as the worker timed it."""
    cli_alone: Latency = field(default_factory=lambda: Latency.of([]))
    """The CLI run by the bench, spawn to exit."""
    beyond_cli_alone: Latency = field(default_factory=lambda: Latency.of([]))
    """Per round: the span less the CLI alone's run just before it."""
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Samples:
    """Seconds, per counted round."""

    span: list[float] = field(default_factory=list)
    cli_in_worker: list[float] = field(default_factory=list)
    cli_alone: list[float] = field(default_factory=list)


def claude_binary(chosen: str | None) -> str:
    """The CLI to run, as the worker would find it (an absolute path), or OverheadUsageError."""
    found = chosen or configured_claude() or find_claude()
    path = shutil.which(str(found)) if found else None
    if path is None:
        raise OverheadUsageError(
            "worker-overhead mode runs the real Claude CLI and found none: `bloom claude "
            "install` fetches it, or set BLOOM_CLAUDE_BIN"
        )
    return str(Path(path).resolve())


def worker_environment(
    data_dir: Path, runtime: Endpoint, model: Endpoint, claude: str, name: str
) -> dict[str, str]:
    """`bloom up --demo-model`'s worker settings, nothing of the caller's BLOOM_… ones, a HOME of
    its own (the CLI keeps its sessions there)."""
    home = data_dir / "home"
    home.mkdir()
    return demo_environment(without_secrets(os.environ), model.url) | {
        "HOME": str(home),
        "BLOOM_DATA_DIR": str(data_dir),
        "BLOOM_WORKER_NAME": name,
        "BLOOM_RUNTIME_URL": runtime.url,
        "BLOOM_CLAUDE_BIN": claude,
    }


async def run_worker_overhead(options: OverheadOptions) -> OverheadReport:
    """Start the runtime, the echo model and a worker, then time the rounds; see the module."""
    if options.tasks < 1 or options.warmup < 0:
        raise OverheadUsageError("--worker-overhead must be positive")
    claude = claude_binary(options.claude_bin)
    async with AsyncExitStack() as stack:
        own = await own_runtime(stack, "overhead", options.database_url, 1)
        runtime, data_dir, storage = own.endpoint, own.data_dir, str(own.target.kind)
        model = Endpoint("127.0.0.1", free_port())
        echo = OwnProcess(
            "echo model",
            ["echo-model", "serve", "--host", model.host, "--port", str(model.port)],
            os.environ,
            data_dir / "echo-model.log",
        )
        stack.callback(echo.stop)
        echo.start()
        name = f"overhead-{uuid.uuid4().hex[:8]}"
        env = worker_environment(data_dir, runtime, model, claude, name)
        worker = OwnProcess("worker", ["worker", "run"], env, data_dir / "worker.log")
        stack.callback(worker.stop)
        await echo.wait_ready(lambda: answers(model, "/_requests"), READY_SEC)
        worker.start()
        await worker.wait_ready(
            lambda: answers(
                runtime,
                f"/api/runtime/workers/{name}",
                lambda r: r.status == 200 and r.json()["status"] == "online",
            ),
            READY_SEC,
        )
        tally = Tally()
        api = RuntimeApi(runtime, tally)
        stack.callback(api.close)
        report = OverheadReport(options, storage, claude)
        samples = _Samples()
        for n in range(options.warmup + options.tasks):
            invocation = Invocation(
                binary=claude,
                prompt=TASK_PROMPT,
                cwd=data_dir / "alone" / str(n),
                env=child_environment(env, TASK_AGENT),
                timeout_sec=CLI_TIMEOUT_SEC,
                extra_args=DEMO_CLAUDE_ARGS,
            )
            alone = await _run_alone(invocation, report, tally)
            task = await _run_task(api, f"{name}-{n}", tally)
            worker.check_running()
            if n >= options.warmup and alone is not None and task is not None:
                samples.cli_alone.append(alone)
                samples.span.append(task[0])
                samples.cli_in_worker.append(task[1])
        report.span = Latency.of(samples.span)
        report.cli_in_worker = Latency.of(samples.cli_in_worker)
        report.overhead = Latency.of(
            [s - c for s, c in zip(samples.span, samples.cli_in_worker, strict=True)]
        )
        report.cli_alone = Latency.of(samples.cli_alone)
        report.beyond_cli_alone = Latency.of(
            [s - a for s, a in zip(samples.span, samples.cli_alone, strict=True)]
        )
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


async def _run_alone(invocation: Invocation, report: OverheadReport, tally: Tally) -> float | None:
    """The CLI run by the bench, spawn to exit (seconds); None, counted as an error, unless it
    ended with a successful result."""
    invocation.cwd.mkdir(parents=True)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *invocation.argv(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=invocation.cwd,
        env=invocation.env,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(
            process.communicate(invocation.prompt.encode()), invocation.timeout_sec
        )
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        tally.note(f"the CLI alone ran over {invocation.timeout_sec} s")
        return None
    elapsed = time.perf_counter() - started
    events = [orjson.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    report.claude_version = next(
        (str(e["claude_code_version"]) for e in events if "claude_code_version" in e),
        report.claude_version,
    )
    if process.returncode != 0 or not any(
        e.get("type") == "result" and not e.get("is_error") for e in events
    ):
        tally.note(f"the CLI alone failed ({process.returncode}): {err.decode()[-300:]}")
        return None
    return elapsed


async def _run_task(api: RuntimeApi, context_id: str, tally: Tally) -> tuple[float, float] | None:
    """Create a task and follow it to its end; (span, the CLI's run as the worker timed it) in
    seconds, or None, counted as an error, unless it completed."""
    task_id = await api.create_task(context_id)
    if task_id is None:
        return None
    events = await api.task_events(task_id)
    status = events[-1].get("status") if events else None
    finished = next((e for e in events if e.get("type") == "finished"), None)
    if status != "completed" or finished is None:
        tally.note(f"task {task_id} ended {status}, not completed")
        return None
    lease = await api.lease(str(finished["lease_id"]))
    if lease is None or lease.get("ended_at") is None:
        tally.note(f"task {task_id}: its lease is not among the newest, or has not ended")
        return None
    span_ms = int(lease["ended_at"]) - int(lease["started_at"])
    return span_ms / 1000, int(finished["data"]["duration_ms"]) / 1000


def as_json(report: OverheadReport) -> dict[str, Any]:
    return {
        "mode": "worker-overhead",
        "storage": report.storage,
        "options": asdict(report.options),
        "claude": report.claude,
        "claude_version": report.claude_version,
        "span": report.span.as_dict(),
        "cli_in_worker": report.cli_in_worker.as_dict(),
        "overhead": report.overhead.as_dict(),
        "cli_alone": report.cli_alone.as_dict(),
        "beyond_cli_alone": report.beyond_cli_alone.as_dict(),
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
    }


def render(report: OverheadReport, console: Console) -> None:
    table = Table(
        title=f"bloom bench --worker-overhead: {report.options.tasks} tasks one at a time, "
        f"{report.storage}, Claude CLI {report.claude_version}"
    )
    for column in ("figure", "p50", "p99", "mean"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for figure, latency in (
        ("span: claim answered → complete accepted", report.span),
        ("CLI, as the worker timed it", report.cli_in_worker),
        ("[bold]worker overhead: span - CLI[/]", report.overhead),
        ("CLI alone, run by the bench", report.cli_alone),
        ("span - CLI alone (the round's)", report.beyond_cli_alone),
    ):
        table.add_row(
            figure, ms_text(latency.p50_ms), ms_text(latency.p99_ms), ms_text(latency.mean_ms)
        )
    console.print(table)
    print_errors(
        console,
        report.errors,
        report.error_samples,
        ok=report.errors == 0,
        requests=report.requests,
    )
