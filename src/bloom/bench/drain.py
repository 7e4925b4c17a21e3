"""Drain mode: a full queue emptied with one call per task, measured as the peers are.

The bench starts its own `bloom runtime serve`, queues `tasks` tasks in batches of
`BATCH` (`POST /llm-tasks/batch`) from one client, then lets `workers` simulated workers drain
them: each claims once, then completes every task with `claim_next`, so that one call records
the attempt and hands over the next one, until a complete answers no next task. With `batch`
above 1, each worker has that many slots and completes all it holds in one call
(`POST /workers/{id}/complete`), claiming up to `batch` next ones in it. Every attempt is
still leased, fenced, stored as a result with its artifact, and audited; only the heartbeat is
left out (a lease needs one only to outlive the acknowledgement window). Measured:

- queued/s: tasks over the time the batches took;
- drained/s: (tasks - 1) / (last complete - first complete), the formula of the peers' benchmark
  (`../shared/bench/peers_bench.py`), on the bench's clock;
- the complete-and-claim call's p50 and p99, and the server's CPU per task while draining;
- safety: a task completed twice, or never, and any refused call, are counted.
"""

import asyncio
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console

from bloom.bench.api import RuntimeApi, Tally
from bloom.bench.server import ModeUsageError, own_runtime, process_tree
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import figures_table, print_errors

BATCH = 100
MAX_BATCH = 32
"""A worker's slots at most (`max_concurrency`)."""
FIRST_CLAIM_WAIT_SEC = 1.0


class DrainUsageError(ModeUsageError):
    """Options that do not go together."""


@dataclass(frozen=True, slots=True)
class DrainOptions:
    tasks: int = 3000
    workers: int = 16
    database_url: str | None = None
    server_workers: int = 1
    batch: int = 1


@dataclass(slots=True)
class DrainReport:
    options: DrainOptions
    storage: str
    queued_per_sec: float = 0.0
    drained_per_sec: float = 0.0
    call: Latency = field(default_factory=lambda: Latency.of([]))
    server_cpu_ms_per_task: float | None = None
    queued: int = 0
    completed: int = 0
    completed_twice: int = 0
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """Every task completed, once; no call refused."""
        return self.errors == 0 and self.completed_twice == 0 and self.completed == self.queued


async def run_drain(options: DrainOptions) -> DrainReport:
    """Queue the tasks, then drain them; see the module's text."""
    if options.tasks < 2 or options.workers < 1:
        raise DrainUsageError("--drain needs at least 2 tasks and 1 worker")
    if not 1 <= options.batch <= MAX_BATCH:
        raise DrainUsageError(f"--batch takes 1 to {MAX_BATCH} (a worker's slots)")
    async with AsyncExitStack() as stack:
        runtime = await own_runtime(stack, "drain", options.database_url, options.server_workers)
        tally = Tally()
        apis = [RuntimeApi(runtime.endpoint, tally) for _ in range(options.workers)]
        for api in apis:
            stack.callback(api.close)
        report = DrainReport(options, str(runtime.target.kind))
        run_id = uuid.uuid4().hex[:8]
        names = [f"drain-{run_id}-{n}" for n in range(options.workers)]
        if not all(
            await asyncio.gather(
                *(api.register_worker(n, options.batch) for api, n in zip(apis, names, strict=True))
            )
        ):
            raise RuntimeError(f"could not register the simulated workers: {tally.samples}")
        started = time.perf_counter()
        queued = await _queue(apis[0], run_id, options.tasks)
        report.queued = len(queued)
        report.queued_per_sec = round(len(queued) / (time.perf_counter() - started), 1)
        drain = _Drain(options.batch)
        cpu_before = process_tree(runtime.server.pid).cpu_sec
        await asyncio.gather(
            *(drain.work(api, name) for api, name in zip(apis, names, strict=True))
        )
        cpu_used = process_tree(runtime.server.pid).cpu_sec - cpu_before
        report.completed = len(drain.done.keys() & queued)
        report.completed_twice = sum(1 for times in drain.done.values() if times > 1)
        if len(drain.finished) > 1:
            span = max(drain.finished) - min(drain.finished)
            report.drained_per_sec = round((len(drain.finished) - 1) / span, 1) if span else 0.0
        report.call = Latency.of(drain.calls)
        if report.completed:
            report.server_cpu_ms_per_task = round(cpu_used * 1000 / report.completed, 3)
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        await asyncio.gather(*(api.remove_worker(n) for api, n in zip(apis, names, strict=True)))
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


async def _queue(api: RuntimeApi, run_id: str, tasks: int) -> set[str]:
    """Queue `tasks` tasks, each of a context of its own, a batch at a time."""
    queued: set[str] = set()
    for first in range(0, tasks, BATCH):
        contexts = [f"drain-{run_id}-{n}" for n in range(first, min(first + BATCH, tasks))]
        queued.update(await api.create_tasks(contexts))
    return queued


@dataclass(slots=True)
class _Drain:
    """What the simulated workers saw, on the `time.perf_counter` clock."""

    batch: int
    done: dict[str, int] = field(default_factory=dict)
    finished: list[float] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)

    async def work(self, api: RuntimeApi, name: str) -> None:
        claim = await api.claim(name, FIRST_CLAIM_WAIT_SEC)
        held = [claim] if claim is not None else []
        while held:
            sent = time.perf_counter()
            if self.batch == 1:
                completed, following = await api.complete_and_claim(held[0], 0)
                ended = [held[0].task_id] if completed else []
                held = [following] if following is not None else []
            else:
                ended, held = await api.complete_many(name, held, self.batch)
            received = time.perf_counter()
            self.calls.append(received - sent)
            for task_id in ended:
                self.done[task_id] = self.done.get(task_id, 0) + 1
                self.finished.append(received)


def as_json(report: DrainReport) -> dict[str, Any]:
    return {
        "mode": "drain",
        "storage": report.storage,
        "options": asdict(report.options),
        "queued_per_sec": report.queued_per_sec,
        "drained_per_sec": report.drained_per_sec,
        "call": report.call.as_dict(),
        "server_cpu_ms_per_task": report.server_cpu_ms_per_task,
        "queued": report.queued,
        "completed": report.completed,
        "completed_twice": report.completed_twice,
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "safe": report.safe,
    }


def render(report: DrainReport, console: Console) -> None:
    options = report.options
    title = (
        f"bloom bench --drain: {options.tasks} tasks, {options.workers} workers, "
        f"{options.server_workers} server process(es), {report.storage}"
        + (f", {options.batch} per call" if options.batch > 1 else "")
    )
    cpu = report.server_cpu_ms_per_task
    rows = (
        (f"queued/s (batches of {BATCH})", f"{report.queued_per_sec:g}"),
        (
            "drained/s (one call per task)"
            if options.batch == 1
            else f"drained/s (one call per {options.batch} tasks)",
            f"{report.drained_per_sec:g}",
        ),
        ("complete + claim call p50", ms_text(report.call.p50_ms)),
        ("complete + claim call p99", ms_text(report.call.p99_ms)),
        ("server CPU per task", "-" if cpu is None else f"{cpu:.2f} ms"),
        (
            "tasks queued / completed / completed twice",
            f"{report.queued} / {report.completed} / {report.completed_twice}",
        ),
    )
    console.print(figures_table(title, rows))
    print_errors(
        console, report.errors, report.error_samples, ok=report.safe, requests=report.requests
    )
