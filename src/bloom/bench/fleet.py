"""Fleet mode: many workers waiting at once, and a trickle of tasks (issue 19's fleet scale).

The bench starts its own `bloom runtime serve` and registers `workers` simulated workers, each
long-polling `POST /workers/{id}/claim` (`wait_seconds` 20 by default) and claiming again as
soon as a claim ends, as a real worker's idle slot does. Once they all wait, the server's CPU
over an idle window says what waiting costs. Then `tasks` tasks are created `interval` seconds
apart; a worker given one completes it at once, without a heartbeat (the grant's acknowledgement
window is what keeps it), then waits again. Measured:

- idle CPU: the server's processes' CPU time over the idle window, in % of one core;
- create → start: from the create's answer to the grant's arrival at a worker (one clock, the
  bench's), p50 and p99, and the slowest deliveries;
- the server's resident memory once the tasks are done;
- safety: a task granted to more than one worker, or a complete refused (the worker's lease was
  superseded: no longer its own), is counted; under any load both must stay 0.
"""

import asyncio
import time
import uuid
from collections import defaultdict
from contextlib import AsyncExitStack, suppress
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from typing import Any

from rich.console import Console

from bloom.bench.api import RuntimeApi, Tally
from bloom.bench.server import ModeUsageError, on_linux, own_runtime, process_tree
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import figures_table, print_errors

REGISTER_AT_ONCE = 100
SLOWEST_SHOWN = 5
SETTLE_SEC_PER_WORKER = 0.002
"""How long the bench lets the workers' first claims reach the server, per worker (1 s at least)."""
DONE_GRACE_SEC = 60.0
ERROR_PAUSE_SEC = 0.5


class FleetUsageError(ModeUsageError):
    """Options that do not go together, or a machine fleet mode cannot read."""


@dataclass(frozen=True, slots=True)
class FleetOptions:
    workers: int = 2000
    tasks: int = 50
    interval: float = 0.1
    """Seconds between two creates."""
    idle: float = 10.0
    """Seconds of the idle window, every worker waiting."""
    wait: float = 20.0
    """Each claim's `wait_seconds`."""
    database_url: str | None = None
    server_workers: int = 1
    contexts: int | None = None
    """The tasks take turns over this many contexts (a context's next task is kept for the worker
    that ran its last one); None: each task a context of its own."""


@dataclass(slots=True)
class FleetReport:
    options: FleetOptions
    storage: str
    idle_cpu_percent: float = 0.0
    rss_kb: int = 0
    start_latency: Latency = field(default_factory=lambda: Latency.of([]))
    created: int = 0
    started: int = 0
    completed: int = 0
    granted_twice: int = 0
    superseded: int = 0
    """Completes refused: the worker's grant was no longer its own when it answered."""
    slowest: list[tuple[str, float, int]] = field(default_factory=list)
    """The slowest deliveries: task id, create → first grant's arrival (ms), grants received."""
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """No task granted twice, no complete refused, every task started."""
        return (
            self.granted_twice == 0
            and self.superseded == 0
            and self.errors == 0
            and self.started == self.created
        )


async def run_fleet(options: FleetOptions) -> FleetReport:
    """Register the fleet, measure it idle, then feed it tasks; see the module's text."""
    if not on_linux():
        raise FleetUsageError("fleet mode reads the server's CPU and memory from /proc: Linux only")
    if (
        options.workers < 1
        or options.tasks < 1
        or options.interval < 0
        or options.idle <= 0
        or (options.contexts is not None and options.contexts < 1)
    ):
        raise FleetUsageError(
            "--fleet, --tasks, --idle and --contexts must be positive, --interval not negative"
        )
    async with AsyncExitStack() as stack:
        runtime = await own_runtime(stack, "fleet", options.database_url, options.server_workers)
        server, endpoint = runtime.server, runtime.endpoint
        tally = Tally()
        fleet = _Fleet(options, [RuntimeApi(endpoint, tally) for _ in range(options.workers)])
        creator = RuntimeApi(endpoint, tally)
        report = FleetReport(options, str(runtime.target.kind))
        try:
            await fleet.register()
            waiting = asyncio.ensure_future(fleet.run())
            await asyncio.sleep(max(1.0, options.workers * SETTLE_SEC_PER_WORKER))
            before = process_tree(server.pid).cpu_sec
            await asyncio.sleep(options.idle)
            report.idle_cpu_percent = round(
                100 * (process_tree(server.pid).cpu_sec - before) / options.idle, 1
            )
            for n in range(options.tasks):
                context = n % options.contexts if options.contexts else n
                task_id = await creator.create_task(f"fleet-{fleet.run_id}-{context}")
                if task_id is not None:
                    fleet.created_at[task_id] = time.monotonic()
                await asyncio.sleep(options.interval)
            await fleet.all_done(options.wait + DONE_GRACE_SEC)
            report.rss_kb = process_tree(server.pid).rss_kb
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        finally:
            fleet.close()
            creator.close()
        report.created = len(fleet.created_at)
        report.started = len(fleet.started_at)
        report.completed = fleet.completed
        report.granted_twice = sum(1 for grants in fleet.grants.values() if grants > 1)
        report.superseded = fleet.superseded
        waited = {
            task_id: fleet.started_at[task_id] - created
            for task_id, created in fleet.created_at.items()
            if task_id in fleet.started_at
        }
        report.start_latency = Latency.of(list(waited.values()))
        report.slowest = [
            (task_id, round(seconds * 1000, 1), fleet.grants[task_id])
            for task_id, seconds in sorted(waited.items(), key=lambda item: -item[1])
        ][:SLOWEST_SHOWN]
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


class _Fleet:
    """The simulated workers: one connection each, one slot each, long-polling."""

    def __init__(self, options: FleetOptions, apis: list[RuntimeApi]):
        self.run_id = uuid.uuid4().hex[:8]
        self.options = options
        self.apis = apis
        self.names = [f"fleet-{self.run_id}-{i}" for i in range(len(apis))]
        self.created_at: dict[str, float] = {}
        self.started_at: dict[str, float] = {}
        self.grants: defaultdict[str, int] = defaultdict(int)
        self.completed = 0
        self.superseded = 0
        self._done = asyncio.Event()

    async def register(self) -> None:
        pairs = list(zip(self.apis, self.names, strict=True))
        for first in range(0, len(pairs), REGISTER_AT_ONCE):
            batch = pairs[first : first + REGISTER_AT_ONCE]
            done = await asyncio.gather(*(api.register_worker(name) for api, name in batch))
            if not all(done):
                raise RuntimeError(
                    f"could not register the simulated workers: {self.apis[0].tally}"
                )

    async def run(self) -> None:
        await asyncio.gather(
            *(self._worker(api, name) for api, name in zip(self.apis, self.names, strict=True))
        )

    async def _worker(self, api: RuntimeApi, name: str) -> None:
        while True:
            asked = time.monotonic()
            claim = await api.claim(name, self.options.wait)
            if claim is None:
                if time.monotonic() - asked < self.options.wait / 2:
                    await asyncio.sleep(ERROR_PAUSE_SEC)  # an error, not a wait: no hot loop
                continue
            self.started_at.setdefault(claim.task_id, time.monotonic())
            self.grants[claim.task_id] += 1
            status = await api.complete_status(claim)
            if status == HTTPStatus.CONFLICT:
                self.superseded += 1
            elif status < HTTPStatus.MULTIPLE_CHOICES:
                self.completed += 1
                if self.completed >= self.options.tasks:
                    self._done.set()

    async def all_done(self, limit_sec: float) -> None:
        """Until every created task completed, or `limit_sec` passed since the last create."""
        if self.completed < len(self.created_at):
            with suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), limit_sec)

    def close(self) -> None:
        for api in self.apis:
            api.close()


def as_json(report: FleetReport) -> dict[str, Any]:
    return {
        "mode": "fleet",
        "storage": report.storage,
        "options": asdict(report.options),
        "idle_cpu_percent": report.idle_cpu_percent,
        "rss_mib": round(report.rss_kb / 1024, 1),
        "create_to_start": report.start_latency.as_dict(),
        "created": report.created,
        "started": report.started,
        "completed": report.completed,
        "granted_twice": report.granted_twice,
        "superseded": report.superseded,
        "slowest": [
            {"task_id": task_id, "ms": ms, "grants": grants}
            for task_id, ms, grants in report.slowest
        ],
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "safe": report.safe,
    }


def _delivery(ms: float, grants: int) -> str:
    return f"{ms_text(ms, 0)} ({grants} grant{'s' if grants > 1 else ''})"


def render(report: FleetReport, console: Console) -> None:
    options = report.options
    title = (
        f"bloom bench --fleet: {options.workers} workers waiting "
        f"(claims of {options.wait:g} s), {options.tasks} tasks {options.interval:g} s apart"
        f"{f' over {options.contexts} contexts' if options.contexts else ''}, {report.storage}"
    )
    latency = report.start_latency
    rows = (
        (f"server CPU, idle {options.idle:g} s", f"{report.idle_cpu_percent:g} % of a core"),
        ("server RSS", f"{report.rss_kb / 1024:.1f} MiB"),
        ("create → start p50", ms_text(latency.p50_ms)),
        ("create → start p99", ms_text(latency.p99_ms)),
        (
            "tasks created / started / completed",
            f"{report.created} / {report.started} / {report.completed}",
        ),
        ("tasks granted to two workers", str(report.granted_twice)),
        ("grants superseded (complete refused)", str(report.superseded)),
        (
            "slowest deliveries",
            ", ".join(_delivery(ms, grants) for _, ms, grants in report.slowest) or "-",
        ),
    )
    console.print(figures_table(title, rows))
    print_errors(
        console, report.errors, report.error_samples, ok=report.safe, requests=report.requests
    )
