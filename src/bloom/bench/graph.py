"""Graph mode: how soon a fan-in's dependent is granted once its last dependency completes.

The bench starts its own `bloom runtime serve` and, `rounds` times, queues a fan-in in one batch
(`dependencies` tasks and one task that waits for them all, docs/graphs.md), then lets `workers`
simulated workers drain it as the drain mode does: each claims once, then completes every task
with `claim_next`, until a complete answers no next task; the dependent is released in the
transaction of its last dependency's complete and granted to whichever claim sees it first
(usually that very complete's `claim_next`), or, if none did, to a claim made afterwards.
Measured, per round:

- release latency: from the moment the complete of the last dependency (the last to be
  answered) was sent to the moment the grant of the dependent was received, on the bench's
  clock; its p50 and p99 over the rounds;
- drain time: from the first claim to the dependent's grant;
- safety: a task completed twice, a dependent granted twice or never, any refused call.
"""

import asyncio
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console

from bloom.bench.api import Claim, RuntimeApi, Tally
from bloom.bench.server import ModeUsageError, own_runtime
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import figures_table, print_errors

FIRST_CLAIM_WAIT_SEC = 1.0
LATE_CLAIM_WAIT_SEC = 10.0
MAX_DEPENDENCIES = 999
"""One batch: the dependencies and their dependent, 1,000 tasks at most."""


class GraphUsageError(ModeUsageError):
    """Options that do not go together."""


@dataclass(frozen=True, slots=True)
class GraphOptions:
    dependencies: int = 500
    rounds: int = 10
    workers: int = 16
    database_url: str | None = None
    server_workers: int = 1


@dataclass(slots=True)
class GraphReport:
    options: GraphOptions
    storage: str
    release: Latency = field(default_factory=lambda: Latency.of([]))
    drain: Latency = field(default_factory=lambda: Latency.of([]))
    released_in_the_complete: int = 0
    """Rounds whose dependent came with the last dependency's own complete (`claim_next`)."""
    rounds: int = 0
    completed: int = 0
    completed_twice: int = 0
    dependents_granted: int = 0
    dependents_granted_twice: int = 0
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """Every dependency completed once, every dependent granted once, no call refused."""
        return (
            self.errors == 0
            and self.completed_twice == 0
            and self.dependents_granted_twice == 0
            and self.dependents_granted == self.rounds
            and self.completed == self.rounds * self.options.dependencies
        )


async def run_graph(options: GraphOptions) -> GraphReport:
    """The rounds; see the module's text."""
    if not 1 <= options.dependencies <= MAX_DEPENDENCIES:
        raise GraphUsageError(f"--graph takes 1 to {MAX_DEPENDENCIES} dependencies")
    if options.workers < 1 or options.rounds < 1:
        raise GraphUsageError("--graph needs at least 1 worker and 1 round")
    async with AsyncExitStack() as stack:
        runtime = await own_runtime(stack, "graph", options.database_url, options.server_workers)
        tally = Tally()
        apis = [RuntimeApi(runtime.endpoint, tally) for _ in range(options.workers)]
        for api in apis:
            stack.callback(api.close)
        report = GraphReport(options, str(runtime.target.kind))
        run_id = uuid.uuid4().hex[:8]
        names = [f"graph-{run_id}-{n}" for n in range(options.workers)]
        if not all(
            await asyncio.gather(
                *(api.register_worker(n) for api, n in zip(apis, names, strict=True))
            )
        ):
            raise RuntimeError(f"could not register the simulated workers: {tally.samples}")
        releases: list[float] = []
        drains: list[float] = []
        for round_ in range(options.rounds):
            dependencies, dependent = await apis[0].create_fan_in(
                f"graph-{run_id}-{round_}", options.dependencies
            )
            if not dependent:
                break
            report.rounds += 1
            fan_in = _FanIn(set(dependencies), dependent)
            started = time.perf_counter()
            await asyncio.gather(
                *(fan_in.work(api, name) for api, name in zip(apis, names, strict=True))
            )
            if fan_in.granted is None:  # no complete's claim_next saw it: a claim of its own
                late = await apis[0].claim(names[0], LATE_CLAIM_WAIT_SEC)
                if late is not None:
                    fan_in.saw(late, time.perf_counter(), in_the_complete=False)
                    await apis[0].complete(late)
            report.completed += len(fan_in.done.keys() & fan_in.dependencies)
            report.completed_twice += sum(1 for times in fan_in.done.values() if times > 1)
            report.dependents_granted += min(fan_in.grants, 1)
            report.dependents_granted_twice += int(fan_in.grants > 1)
            if fan_in.granted is not None and fan_in.last_sent is not None:
                releases.append(fan_in.granted - fan_in.last_sent)
                drains.append(fan_in.granted - started)
                report.released_in_the_complete += int(fan_in.in_the_complete)
        report.release = Latency.of(releases)
        report.drain = Latency.of(drains)
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        await asyncio.gather(*(api.remove_worker(n) for api, n in zip(apis, names, strict=True)))
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


@dataclass(slots=True)
class _FanIn:
    """One round, as the simulated workers saw it, on the `time.perf_counter` clock."""

    dependencies: set[str]
    dependent: str
    done: dict[str, int] = field(default_factory=dict)
    last_sent: float | None = None
    """When the complete answered last of the dependencies' was sent."""
    last_received: float = 0.0
    granted: float | None = None
    grants: int = 0
    in_the_complete: bool = False

    def saw(self, claim: Claim | None, received: float, *, in_the_complete: bool) -> None:
        if claim is not None and claim.task_id == self.dependent:
            self.grants += 1
            self.granted = received
            self.in_the_complete = in_the_complete

    async def work(self, api: RuntimeApi, name: str) -> None:
        held = await api.claim(name, FIRST_CLAIM_WAIT_SEC)
        self.saw(held, time.perf_counter(), in_the_complete=False)
        while held is not None:
            if held.task_id == self.dependent:  # the round's end: complete it, claim no more
                await api.complete(held)
                return
            sent = time.perf_counter()
            completed, following = await api.complete_and_claim(held, 0)
            received = time.perf_counter()
            if completed:
                self.done[held.task_id] = self.done.get(held.task_id, 0) + 1
                if held.task_id in self.dependencies and received >= self.last_received:
                    self.last_sent, self.last_received = sent, received
            self.saw(following, received, in_the_complete=True)
            held = following


def as_json(report: GraphReport) -> dict[str, Any]:
    return {
        "mode": "graph",
        "storage": report.storage,
        "options": asdict(report.options),
        "release": report.release.as_dict(),
        "drain": report.drain.as_dict(),
        "released_in_the_complete": report.released_in_the_complete,
        "rounds": report.rounds,
        "completed": report.completed,
        "completed_twice": report.completed_twice,
        "dependents_granted": report.dependents_granted,
        "dependents_granted_twice": report.dependents_granted_twice,
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "safe": report.safe,
    }


def render(report: GraphReport, console: Console) -> None:
    options = report.options
    title = (
        f"bloom bench --graph: fan-ins of {options.dependencies}, {report.rounds} rounds, "
        f"{options.workers} workers, {options.server_workers} server process(es), "
        f"{report.storage}"
    )
    rows = (
        ("release latency p50 (last complete sent → granted)", ms_text(report.release.p50_ms)),
        ("release latency p99", ms_text(report.release.p99_ms)),
        ("granted by the last complete's claim_next", f"{report.released_in_the_complete}"),
        ("fan-in drained p50 (first claim → dependent granted)", ms_text(report.drain.p50_ms)),
        (
            "dependencies completed / twice",
            f"{report.completed} / {report.completed_twice}",
        ),
        (
            "dependents granted / twice",
            f"{report.dependents_granted} / {report.dependents_granted_twice}",
        ),
    )  # fmt: skip
    console.print(figures_table(title, rows))
    print_errors(
        console, report.errors, report.error_samples, ok=report.safe, requests=report.requests
    )
