"""Graph mode: graphs made in one batch call and drained by simulated workers; how soon a task is
granted once its last dependency completes, and whether each was completed, released and granted
exactly once, never before its dependencies.

Two shapes (`--shape`), each made `rounds` times, each time in one batch (at most 1,000 tasks):

- `fan-in` (the default): `size` tasks and one that waits for them all;
- `layers`: `size` tasks in layers of `width`, each task after the first layer waiting for 1 to
  3 tasks of the layer before, chosen by a seeded generator (the same graph every run).

The bench starts its own `bloom runtime serve` and lets `workers` simulated workers drain each
graph as the drain mode does: each claims, then completes every task with `claim_next` (wait 0)
while that answers a next task. A dependent is released in the transaction of its last
dependency's complete and granted to whichever claim sees it first (usually that very
complete's `claim_next`). In a fan-in a worker whose chain of tasks ends leaves; in layers it
claims again (a 1 s long poll, as a fleet's idle slots do) until every task is done or nothing
has moved for 10 s. A task still queued after that is claimed and completed by one more claim.

Measured and checked, per graph:

- release latency, per dependent: from the moment the complete of its last dependency (the
  last to be answered) was sent to the moment its grant was received, on the bench's clock;
  p50 and p99 over every dependent of the run;
- drained: from the first claim to the graph's last grant;
- from the answers the workers got: tasks completed twice or never, dependents granted twice or
  never, or granted before the complete of one of their dependencies was even sent; any refused
  call;
- from the database once the graph is drained (`runtime.storage.ledger`): each dependent's
  `task_released` audit entries (exactly one; none for a task that waits for nothing), and its
  leases' start against its dependencies' results (no lease before its last dependency's
  result, on the server's clock);
- at the end of the run, the overview's counts (`GET /stats`, kept by the database's
  triggers) against every task counted.
"""

import asyncio
import random
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Console

from bloom.bench.api import Claim, RuntimeApi, Tally
from bloom.bench.server import ModeUsageError, own_runtime
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import figures_table, print_errors
from bloom.runtime.storage.ledger import TaskLedger, count_by_status, ledgers

FIRST_CLAIM_WAIT_SEC = 1.0
LATE_CLAIM_WAIT_SEC = 10.0
MAX_TASKS = 1000
"""One batch's bound (docs/graphs.md)."""
MAX_DEPENDENCIES = MAX_TASKS - 1
"""A fan-in: its dependencies and their dependent in one batch."""
LAYER_DEPENDENCIES = (1, 3)
"""Tasks of the layer before that a task of a later layer waits for, at least and at most."""
LAYER_SEED = 35

Plan = list[tuple[int, ...]]
"""A graph: for each task, in the batch's order, the numbers of the earlier tasks it waits for."""


class GraphUsageError(ModeUsageError):
    """Options that do not go together."""


class Shape(StrEnum):
    FAN_IN = "fan-in"
    LAYERS = "layers"


@dataclass(frozen=True, slots=True)
class GraphOptions:
    size: int = 500
    """A fan-in's dependencies (its dependent is one task more); layers: the tasks."""
    rounds: int = 10
    workers: int = 16
    database_url: str | None = None
    server_workers: int = 1
    shape: Shape = Shape.FAN_IN
    width: int = 100
    """Layers: tasks per layer (the last may have fewer)."""


def fan_in(dependencies: int) -> Plan:
    """`dependencies` tasks, then one that waits for them all."""
    return [() for _ in range(dependencies)] + [tuple(range(dependencies))]


def layers(tasks: int, width: int, seed: int = LAYER_SEED) -> Plan:
    """`tasks` tasks in layers of `width`: the first layer's wait for nothing; each later one
    for 1 to 3 distinct tasks of the layer before (all of it, when it is narrower), drawn by a
    generator seeded with `seed`."""
    draw = random.Random(seed)  # the same graph every run
    plan: Plan = []
    for n in range(tasks):
        layer_start = n - n % width
        if layer_start == 0:
            plan.append(())
            continue
        count = min(draw.randint(*LAYER_DEPENDENCIES), width)
        chosen = draw.sample(range(layer_start - width, layer_start), count)
        plan.append(tuple(sorted(chosen)))
    return plan


def plan_of(options: GraphOptions) -> Plan:
    """The graph `options` ask for; GraphUsageError when they do not make one."""
    if options.workers < 1 or options.rounds < 1:
        raise GraphUsageError("--graph needs at least 1 worker and 1 round")
    if options.shape is Shape.FAN_IN:
        if not 1 <= options.size <= MAX_DEPENDENCIES:
            raise GraphUsageError(f"--graph takes 1 to {MAX_DEPENDENCIES} dependencies")
        return fan_in(options.size)
    if not 2 <= options.size <= MAX_TASKS:
        raise GraphUsageError(f"--graph --shape layers takes 2 to {MAX_TASKS} tasks")
    if not 1 <= options.width < options.size:
        raise GraphUsageError("--width takes 1 to --graph - 1 tasks: two layers at least")
    return layers(options.size, options.width)


@dataclass(slots=True)
class GraphReport:
    options: GraphOptions
    storage: str
    tasks: int = 0
    """Tasks of one graph."""
    release: Latency = field(default_factory=lambda: Latency.of([]))
    drain: Latency = field(default_factory=lambda: Latency.of([]))
    released_in_the_complete: int = 0
    """Dependents granted by a complete's own `claim_next` (usually their last dependency's)."""
    rounds: int = 0
    completed: int = 0
    completed_twice: int = 0
    dependents: int = 0
    """Tasks made that wait for others, over all rounds."""
    dependents_granted: int = 0
    dependents_granted_twice: int = 0
    granted_early: int = 0
    """Dependents granted before one of their dependencies completed, by either clock."""
    released: int = 0
    """Tasks with a `task_released` audit entry."""
    released_twice: int = 0
    overview_counts: dict[str, int] = field(default_factory=dict)
    """Tasks per status as the overview shows them (`GET /stats`), at the end."""
    counted: dict[str, int] = field(default_factory=dict)
    """Tasks per status, every task counted, at the end."""
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """Every task completed once; every dependent released once and granted once, none
        before its dependencies completed; the overview's counts exact; no call refused."""
        return (
            self.errors == 0
            and self.completed == self.rounds * self.tasks
            and self.completed_twice == 0
            and self.dependents_granted == self.dependents
            and self.dependents_granted_twice == 0
            and self.granted_early == 0
            and self.released == self.dependents
            and self.released_twice == 0
            and self.overview_counts == self.counted
        )


async def run_graph(options: GraphOptions) -> GraphReport:
    """The rounds; see the module's text."""
    plan = plan_of(options)
    async with AsyncExitStack() as stack:
        runtime = await own_runtime(stack, "graph", options.database_url, options.server_workers)
        tally = Tally()
        apis = [RuntimeApi(runtime.endpoint, tally) for _ in range(options.workers)]
        for api in apis:
            stack.callback(api.close)
        report = GraphReport(options, str(runtime.target.kind), tasks=len(plan))
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
            ids = await apis[0].create_graph(f"graph-{run_id}-{round_}", plan)
            if not ids:
                break
            report.rounds += 1
            after = {ids[n]: tuple(ids[m] for m in waits) for n, waits in enumerate(plan) if waits}
            drain = _Drain(ids, after, linger=options.shape is Shape.LAYERS)
            await asyncio.gather(
                *(drain.work(api, name) for api, name in zip(apis, names, strict=True))
            )
            await drain.leftovers(apis[0], names[0])
            stored = await asyncio.to_thread(ledgers, runtime.target, ids)
            _count(report, drain, stored)
            releases += drain.release_latencies()
            if drain.granted:
                drains.append(max(drain.granted.values()) - drain.started)
        report.release = Latency.of(releases)
        report.drain = Latency.of(drains)
        report.overview_counts = await apis[0].task_counts()
        report.counted = await asyncio.to_thread(count_by_status, runtime.target)
        report.requests, report.errors = tally.requests, tally.errors
        report.error_samples = tally.samples
        await asyncio.gather(*(api.remove_worker(n) for api, n in zip(apis, names, strict=True)))
        return report
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


def _count(report: GraphReport, drain: "_Drain", stored: dict[str, TaskLedger]) -> None:
    """One drained graph's figures into the run's."""
    report.completed += len(drain.done)
    report.completed_twice += sum(1 for times in drain.done.values() if times > 1)
    report.dependents += len(drain.after)
    granted = [drain.grants.get(task_id, 0) for task_id in drain.after]
    report.dependents_granted += sum(1 for times in granted if times)
    report.dependents_granted_twice += sum(1 for times in granted if times > 1)
    report.released_in_the_complete += len(drain.in_the_complete & drain.after.keys())
    report.granted_early += sum(
        1
        for task_id, waits in drain.after.items()
        if drain.granted_early(task_id) or _stored_early(stored, task_id, waits)
    )
    report.released += sum(1 for ledger in stored.values() if ledger.released)
    report.released_twice += sum(1 for ledger in stored.values() if ledger.released > 1)


def _stored_early(stored: dict[str, TaskLedger], task_id: str, waits: tuple[str, ...]) -> bool:
    """Whether a lease of `task_id` started before one of its dependencies had a successful
    result, on the server's clock (the same milliseconds: the grant of the complete that stored
    it)."""
    leases = stored[task_id].granted_at
    if not leases:
        return False
    results = [stored[dependency].completed_at for dependency in waits]
    return any(not times or min(leases) < min(times) for times in results)


@dataclass(slots=True)
class _Drain:
    """One graph being drained, as the simulated workers saw it, on the `time.perf_counter`
    clock."""

    ids: list[str]
    after: dict[str, tuple[str, ...]]
    """Each dependent's dependencies."""
    linger: bool
    """Whether a worker whose chain of tasks ends claims again (layers) or leaves (a fan-in)."""
    started: float = field(default_factory=time.perf_counter)
    moved: float = field(default_factory=time.perf_counter)
    """When a complete was last answered."""
    done: dict[str, int] = field(default_factory=dict)
    """Completes answered, by task."""
    sent: dict[str, float] = field(default_factory=dict)
    """When each task's (first answered) complete was sent."""
    answered: dict[str, float] = field(default_factory=dict)
    grants: dict[str, int] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    """When each task's first grant was received."""
    in_the_complete: set[str] = field(default_factory=set)
    """Tasks whose first grant came with a complete (`claim_next`)."""

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.ids)

    def granted_early(self, task_id: str) -> bool:
        """Whether `task_id` was granted before the complete of one of its dependencies was
        sent (or one never completed)."""
        at = self.granted.get(task_id)
        return at is not None and any(
            dependency not in self.sent or at < self.sent[dependency]
            for dependency in self.after[task_id]
        )

    def release_latencies(self) -> list[float]:
        """Per dependent granted: from its last answered dependency's complete sent to its
        grant received."""
        latencies = []
        for task_id, waits in self.after.items():
            if task_id in self.granted and all(w in self.answered for w in waits):
                last = max(waits, key=self.answered.__getitem__)
                latencies.append(self.granted[task_id] - self.sent[last])
        return latencies

    async def work(self, api: RuntimeApi, name: str) -> None:
        """One worker: claim, complete with `claim_next` while that answers a task; then, in
        layers, claim again until the graph is done or stands still."""
        while True:
            held = await api.claim(name, FIRST_CLAIM_WAIT_SEC)
            self._saw(held, time.perf_counter(), in_the_complete=False)
            await self._chain(api, held)
            if not self.linger or self.finished:
                return
            if time.perf_counter() - self.moved > LATE_CLAIM_WAIT_SEC:
                return

    async def leftovers(self, api: RuntimeApi, name: str) -> None:
        """What the workers left queued (in a fan-in: a dependent that no complete's
        `claim_next` took), claimed and drained by one worker."""
        while not self.finished:
            held = await api.claim(name, LATE_CLAIM_WAIT_SEC)
            if held is None:
                return
            self._saw(held, time.perf_counter(), in_the_complete=False)
            await self._chain(api, held)

    async def _chain(self, api: RuntimeApi, held: Claim | None) -> None:
        while held is not None:
            sent = time.perf_counter()
            completed, following = await api.complete_and_claim(held, 0)
            received = time.perf_counter()
            if completed:
                self.done[held.task_id] = self.done.get(held.task_id, 0) + 1
                self.sent.setdefault(held.task_id, sent)
                self.answered.setdefault(held.task_id, received)
                self.moved = received
            self._saw(following, received, in_the_complete=True)
            held = following

    def _saw(self, claim: Claim | None, received: float, *, in_the_complete: bool) -> None:
        if claim is None:
            return
        task_id = claim.task_id
        self.grants[task_id] = self.grants.get(task_id, 0) + 1
        if task_id not in self.granted:
            self.granted[task_id] = received
            if in_the_complete:
                self.in_the_complete.add(task_id)


def as_json(report: GraphReport) -> dict[str, Any]:
    return {
        "mode": "graph",
        "storage": report.storage,
        "options": asdict(report.options),
        "tasks": report.tasks,
        "release": report.release.as_dict(),
        "drain": report.drain.as_dict(),
        "released_in_the_complete": report.released_in_the_complete,
        "rounds": report.rounds,
        "completed": report.completed,
        "completed_twice": report.completed_twice,
        "dependents": report.dependents,
        "dependents_granted": report.dependents_granted,
        "dependents_granted_twice": report.dependents_granted_twice,
        "granted_early": report.granted_early,
        "released": report.released,
        "released_twice": report.released_twice,
        "counts": {"overview": report.overview_counts, "counted": report.counted},
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "safe": report.safe,
    }


def render(report: GraphReport, console: Console) -> None:
    options = report.options
    if options.shape is Shape.FAN_IN:
        graphs = f"fan-ins of {options.size}, {report.rounds} rounds"
    else:
        graphs = (
            f"layered graphs of {options.size} tasks (layers of {options.width}), "
            f"{report.rounds} round(s)"
        )
    title = (
        f"bloom bench --graph: {graphs}, {options.workers} workers, "
        f"{options.server_workers} server process(es), {report.storage}"
    )
    counts = (
        "yes"
        if report.overview_counts == report.counted
        else (f"no: {report.overview_counts} against {report.counted}")
    )
    rows = (
        ("release latency p50 (last dependency's complete sent → granted)",
         ms_text(report.release.p50_ms)),
        ("release latency p99", ms_text(report.release.p99_ms)),
        ("granted by a complete's claim_next",
         f"{report.released_in_the_complete} of {report.dependents_granted}"),
        ("drained p50 (first claim → last grant)", ms_text(report.drain.p50_ms)),
        ("tasks completed / twice",
         f"{report.completed} of {report.rounds * report.tasks} / {report.completed_twice}"),
        ("dependents granted / twice / before a dependency completed",
         f"{report.dependents_granted} of {report.dependents} / "
         f"{report.dependents_granted_twice} / {report.granted_early}"),
        ("dependents released (task_released entries) / twice",
         f"{report.released} / {report.released_twice}"),
        ("overview counts equal a full count", counts),
    )  # fmt: skip
    console.print(figures_table(title, rows))
    print_errors(
        console, report.errors, report.error_samples, ok=report.safe, requests=report.requests
    )
