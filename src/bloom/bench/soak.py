"""Soak mode: a steady load for a long time, and what it does to the server and its database.

The bench starts its own `bloom runtime serve`; a fleet of simulated workers (registered, each
long-polling its claims, heartbeating and completing as a real worker does) runs full cycles at a
fixed total rate, paced, never in bursts. Every `sample_every` seconds it records the server
processes' resident memory and open descriptors (from /proc, so Linux only) and the database's
vitals (connections, size, live and dead rows per table, vacuums). The verdict compares the run
once settled (the median of its second fifth: pools, caches and the planner warmed up) with its
end (the median of its last fifth): a leak shows as growth there, a steady state as none.
"""

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from bloom.bench.api import RuntimeApi, Tally
from bloom.bench.server import ModeUsageError, on_linux, own_runtime, process_tree
from bloom.runtime.storage.vitals import DatabaseVitals, read_vitals

CLAIM_WAIT_SEC = 5.0
MIN_ROWS_PER_SIZE = 100


class SoakUsageError(ModeUsageError):
    """Options that do not go together, or a machine soak mode cannot read."""


@dataclass(frozen=True, slots=True)
class SoakOptions:
    duration: float
    rate: float
    """Full cycles per second, the whole fleet's."""
    workers: int = 16
    sample_every: float = 60.0
    database_url: str | None = None
    server_workers: int = 1


@dataclass(frozen=True, slots=True)
class Sample:
    at_sec: float
    cycles: int
    """Completed since the start."""
    errors: int
    rss_kb: int
    """The server's processes together."""
    fds: int
    database: DatabaseVitals


@dataclass(frozen=True, slots=True)
class Trend:
    """One figure over the run: once settled, at the end, its peak, and the change."""

    figure: str
    settled: float
    end: float
    peak: float

    @property
    def change(self) -> float:
        return self.end - self.settled

    @property
    def change_ratio(self) -> float | None:
        return None if self.settled == 0 else round(self.change / self.settled, 3)


@dataclass(slots=True)
class SoakReport:
    options: SoakOptions
    storage: str
    samples: list[Sample] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def cycles_per_sec(self) -> float:
        if not self.samples or self.samples[-1].at_sec == 0:
            return 0.0
        return round(self.samples[-1].cycles / self.samples[-1].at_sec, 2)

    def trends(self) -> list[Trend]:
        """The figures that must stay flat. A table grows with the work it keeps; what must not
        grow is its share of dead rows (bloat autovacuum has not reclaimed yet) and its size per
        live row, measured once it holds enough rows for that to mean something."""
        samples = self.samples
        series: dict[str, list[float]] = {
            "server RSS (MiB)": [s.rss_kb / 1024 for s in samples],
            "server descriptors": [float(s.fds) for s in samples],
        }
        connections = [s.database.connections for s in samples]
        if all(n is not None for n in connections):
            series["database connections"] = [float(n or 0) for n in connections]
        for name in sorted({t.name for s in samples for t in s.database.tables}):
            rows = [t for s in samples for t in s.database.tables if t.name == name]
            if any(t.dead_rows for t in rows):
                series[f"{name}: dead rows (%)"] = [
                    100 * (t.dead_rows or 0) / max(1, t.live_rows + (t.dead_rows or 0))
                    for t in rows
                ]
            grown = [t for t in rows if t.bytes is not None and t.live_rows >= MIN_ROWS_PER_SIZE]
            if grown:
                series[f"{name}: bytes per live row"] = [
                    (t.bytes or 0) / t.live_rows for t in grown
                ]
        free = [s.database.free_bytes for s in samples]
        if all(n is not None for n in free):
            series["free bytes (SQLite)"] = [float(n or 0) for n in free]
        return [trend(name, values) for name, values in series.items() if values]


def trend(figure: str, values: Sequence[float]) -> Trend:
    """The median of the second fifth against the median of the last fifth (each at least one
    sample), and the peak."""
    fifth = max(1, len(values) // 5)
    settled = statistics.median(values[fifth : 2 * fifth] or values[:1])
    end = statistics.median(values[-fifth:])
    return Trend(figure, round(settled, 1), round(end, 1), round(max(values), 1))


async def run_soak(
    options: SoakOptions, on_sample: Callable[[Sample], None] | None = None
) -> SoakReport:
    """Run the fleet against a server of the bench's own for `options.duration` seconds."""
    if not on_linux():
        raise SoakUsageError("soak mode reads the server's memory from /proc: Linux only")
    if options.rate <= 0 or options.sample_every <= 0:
        raise SoakUsageError("--rate and --sample-every must be positive")
    async with AsyncExitStack() as stack:
        runtime = await own_runtime(stack, "soak", options.database_url, options.server_workers)
        server, endpoint, target = runtime.server, runtime.endpoint, runtime.target
        report = SoakReport(options, str(target.kind))
        tally = Tally()
        fleet = _Fleet(options, [RuntimeApi(endpoint, tally) for _ in range(options.workers)])
        try:
            await fleet.register()
            started = time.monotonic()

            async def sample() -> None:
                vitals = await asyncio.to_thread(read_vitals, target)
                usage = process_tree(server.pid)
                rss_kb, fds = usage.rss_kb, usage.fds
                at = round(time.monotonic() - started, 1)
                taken = Sample(at, fleet.cycles, tally.errors, rss_kb, fds, vitals)
                report.samples.append(taken)
                if on_sample is not None:
                    on_sample(taken)

            load = asyncio.ensure_future(fleet.run(started + options.duration))
            await sample()
            while not load.done():
                await asyncio.wait({load}, timeout=options.sample_every)
                await sample()
            await load
            await fleet.drain()
        finally:
            fleet.close()
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


class _Fleet:
    """Simulated workers, each starting a cycle every `workers / rate` seconds, staggered."""

    def __init__(self, options: SoakOptions, apis: list[RuntimeApi]):
        run = uuid.uuid4().hex[:8]
        self.apis = apis
        self.names = [f"soak-{run}-{i}" for i in range(len(apis))]
        self.period = len(apis) / options.rate
        self.cycles = 0

    async def register(self) -> None:
        done = await asyncio.gather(
            *(api.register_worker(name) for api, name in zip(self.apis, self.names, strict=True))
        )
        if not all(done):
            raise RuntimeError(f"could not register the simulated workers: {self.apis[0].tally}")

    async def run(self, until: float) -> None:
        await asyncio.gather(
            *(
                self._worker(api, name, i * self.period / len(self.apis), until)
                for i, (api, name) in enumerate(zip(self.apis, self.names, strict=True))
            )
        )

    async def _worker(self, api: RuntimeApi, name: str, offset: float, until: float) -> None:
        next_at = time.monotonic() + offset
        n = 0
        while next_at < until:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            n += 1
            if await api.create_task(f"{name}-{n}") is not None:
                claim = await api.claim(name, CLAIM_WAIT_SEC)
                if claim is not None and await api.heartbeat(claim) and await api.complete(claim):
                    self.cycles += 1
            next_at = max(next_at + self.period, time.monotonic())  # behind: no burst to catch up

    async def drain(self) -> None:
        """Finish whatever the run left queued, then unregister."""
        api, name = self.apis[0], self.names[0]
        while (claim := await api.claim(name, 0)) is not None:
            await api.complete(claim)
        await asyncio.gather(
            *(api.remove_worker(name) for api, name in zip(self.apis, self.names, strict=True))
        )

    def close(self) -> None:
        for api in self.apis:
            api.close()


def as_json(report: SoakReport) -> dict[str, Any]:
    return {
        "mode": "soak",
        "storage": report.storage,
        "options": asdict(report.options),
        "cycles_per_sec": report.cycles_per_sec,
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "trends": [asdict(t) | {"change_ratio": t.change_ratio} for t in report.trends()],
        "samples": [asdict(s) for s in report.samples],
    }


def sample_line(sample: Sample) -> str:
    """One sample as a progress line."""
    db = sample.database
    line = (
        f"{sample.at_sec:>7.0f} s · {sample.cycles} cycles · {sample.errors} errors · "
        f"RSS {sample.rss_kb / 1024:.1f} MiB · {sample.fds} fds · db {db.bytes / 2**20:.1f} MiB"
    )
    if db.connections is not None:
        dead = sum(t.dead_rows or 0 for t in db.tables)
        line += f" · {db.connections} db connections · {dead} dead rows"
    return line


def render(report: SoakReport, console: Console) -> None:
    options = report.options
    table = Table(
        title=f"bloom bench --soak: {options.duration:g} s at {options.rate:g} cycles/s, "
        f"{options.workers} workers, {report.storage}"
    )
    for column in ("figure", "settled", "end", "peak", "change"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for t in report.trends():
        ratio = "" if t.change_ratio is None else f" ({t.change_ratio:+.1%})"
        table.add_row(
            t.figure, f"{t.settled:g}", f"{t.end:g}", f"{t.peak:g}", f"{t.change:+g}{ratio}"
        )
    console.print(table)
    console.print(f"achieved {report.cycles_per_sec:g} cycles/s, {report.requests} requests")
    style = "green" if report.errors == 0 else "bold red"
    console.print(f"[{style}]errors: {report.errors}[/]")
    for sample in report.error_samples:
        console.print(f"  [red]{sample}[/]", markup=False)
