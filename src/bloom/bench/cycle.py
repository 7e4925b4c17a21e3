"""Cycle mode: N simulated workers create → claim → heartbeat → complete for a bounded time.

Only the measured window counts: a warm-up runs first, then `duration` seconds in which every
completed cycle, claim request and create-to-claim interval is recorded. A claim may hand a worker
the task another worker created, so create and claim instants are matched by task id. When the
window closes, the workers take the tasks they created that are still queued (a short drain,
not measured), so a run leaves no queued work behind, and unregister.
"""

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from bloom.bench.api import Claim, RuntimeApi, Tally
from bloom.bench.backends import Backends
from bloom.bench.http import Endpoint
from bloom.bench.server import machine_cpu_sec, on_linux, process_tree
from bloom.bench.stats import Latency

CLAIM_WAIT_SEC = 5.0
DRAIN_SEC = 10.0


@dataclass(frozen=True, slots=True)
class CycleReport:
    workers: int
    warmup_sec: float
    duration_sec: float
    cycles: int
    cycles_per_sec: float
    claim: Latency
    create_to_claim: Latency
    requests: int
    errors: int
    error_samples: list[str]
    client_cpu_ms_per_request: float | None
    server_cpu_ms_per_cycle: float | None
    """The runtime's processes' CPU time ÷ cycles, over the window: the bench's own server only."""
    database_cpu_ms_per_cycle: float | None
    """The database's backends' CPU time ÷ cycles, over the window: a PostgreSQL of this machine
    only (a backend that exits before the window ends is left out)."""
    machine_cpu_ms_per_cycle: float | None
    """All of this machine's CPU time at work ÷ cycles, over the window (Linux): the server, its
    database, the bench itself and whatever else runs here. What a cycle costs, apart from how
    long its waits are: a saving shows here even in a run whose rate is bound by waits."""


@dataclass(slots=True)
class _Recorder:
    """What the simulated workers observed, on the `time.perf_counter` clock."""

    start: float
    end: float
    cycles: int = 0
    claim_latencies: list[float] = field(default_factory=list)
    created: dict[str, float] = field(default_factory=dict)
    claimed: dict[str, float] = field(default_factory=dict)
    unclaimed: set[str] = field(default_factory=set)

    def in_window(self, instant: float) -> bool:
        return self.start <= instant < self.end

    def on_created(self, task_id: str, instant: float) -> None:
        self.created[task_id] = instant
        if task_id not in self.claimed:  # the claim's reply may be read before the create's
            self.unclaimed.add(task_id)

    def on_claimed(self, task_id: str, instant: float) -> None:
        self.claimed[task_id] = instant
        self.unclaimed.discard(task_id)

    def create_to_claim(self) -> list[float]:
        """Per task created in the window: from its create reply to its claim reply."""
        return [
            max(0.0, self.claimed[task_id] - created)
            for task_id, created in self.created.items()
            if self.in_window(created) and task_id in self.claimed
        ]


class _SimulatedWorker:
    def __init__(self, name: str, api: RuntimeApi, recorder: _Recorder):
        self.name = name
        self.api = api
        self.rec = recorder

    async def run(self) -> None:
        n = 0
        while time.perf_counter() < self.rec.end:
            n += 1
            task_id = await self.api.create_task(f"{self.name}-{n}")
            if task_id is not None:
                self.rec.on_created(task_id, time.perf_counter())
            sent = time.perf_counter()
            claim = await self.api.claim(self.name, CLAIM_WAIT_SEC)
            received = time.perf_counter()
            if self.rec.in_window(sent):
                self.rec.claim_latencies.append(received - sent)
            if claim is not None:
                self.rec.on_claimed(claim.task_id, received)
                if await self._finish(claim) and self.rec.in_window(time.perf_counter()):
                    self.rec.cycles += 1

    async def drain(self, deadline: float) -> None:
        """Take the run's own tasks that are still queued, so none are left behind."""
        while self.rec.unclaimed and time.perf_counter() < deadline:
            claim = await self.api.claim(self.name, 0.2)
            if claim is not None:
                self.rec.on_claimed(claim.task_id, time.perf_counter())
                await self._finish(claim)

    async def _finish(self, claim: Claim) -> bool:
        beat = await self.api.heartbeat(claim)
        return await self.api.complete(claim) and beat


async def run_cycles(
    endpoint: Endpoint,
    *,
    workers: int,
    duration: float,
    warmup: float,
    server_pid: int | None = None,
    backends: Backends | None = None,
) -> CycleReport:
    """Drive `workers` simulated workers against the runtime at `endpoint`, whose process is
    `server_pid` when the bench started it, and whose database is served by `backends` when it
    is a PostgreSQL of this machine."""
    run = uuid.uuid4().hex[:8]
    tally = Tally()
    apis = [RuntimeApi(endpoint, tally) for _ in range(workers)]
    try:
        names = [f"bench-{run}-{i}" for i in range(workers)]
        await asyncio.gather(*(api.conn.connect() for api in apis))
        registered = await asyncio.gather(
            *(api.register_worker(name) for api, name in zip(apis, names, strict=True))
        )
        if not all(registered):
            raise RuntimeError(f"could not register the simulated workers: {tally.samples}")
        start = time.perf_counter() + warmup
        recorder = _Recorder(start=start, end=start + duration)
        sims = [_SimulatedWorker(n, api, recorder) for n, api in zip(names, apis, strict=True)]
        cpu = _CpuMeter(tally, recorder, server_pid, backends)
        await asyncio.gather(cpu.run(), *(sim.run() for sim in sims))
        deadline = time.perf_counter() + DRAIN_SEC
        await asyncio.gather(*(sim.drain(deadline) for sim in sims))
        await asyncio.gather(
            *(api.remove_worker(name) for api, name in zip(apis, names, strict=True))
        )
    finally:
        for api in apis:
            api.close()
    return CycleReport(
        workers=workers,
        warmup_sec=warmup,
        duration_sec=duration,
        cycles=recorder.cycles,
        cycles_per_sec=round(recorder.cycles / duration, 1),
        claim=Latency.of(recorder.claim_latencies),
        create_to_claim=Latency.of(recorder.create_to_claim()),
        requests=tally.requests,
        errors=tally.errors,
        error_samples=tally.samples,
        client_cpu_ms_per_request=cpu.ms_per_request(),
        server_cpu_ms_per_cycle=cpu.ms_per_cycle(_SERVER),
        database_cpu_ms_per_cycle=cpu.database_ms_per_cycle(),
        machine_cpu_ms_per_cycle=cpu.ms_per_cycle(_MACHINE),
    )


_CLIENT, _SERVER, _MACHINE = range(3)


@dataclass(frozen=True, slots=True)
class _Mark:
    cpu_sec: tuple[float | None, float | None, float | None]
    """This process's, the server's and the machine's CPU time (None: not known here)."""
    backends: dict[int, float] | None
    """The database's backends' CPU time, by process id."""
    requests: int
    cycles: int


class _CpuMeter:
    """CPU time over the measured window: this process's per request; the server's, the
    database's and the machine's per cycle."""

    def __init__(
        self,
        tally: Tally,
        recorder: _Recorder,
        server_pid: int | None,
        backends: Backends | None,
    ):
        self.tally = tally
        self.recorder = recorder
        self.server_pid = server_pid if on_linux() else None
        self.backends = backends
        self.marks: list[_Mark] = []

    async def run(self) -> None:
        """Mark the window's start and end (the time until each awaited)."""
        for instant in (self.recorder.start, self.recorder.end):
            await asyncio.sleep(max(0.0, instant - time.perf_counter()))
            await self._mark()

    async def _mark(self) -> None:
        backends = None if self.backends is None else await self.backends.cpu_sec()
        server = None if self.server_pid is None else process_tree(self.server_pid).cpu_sec
        machine = machine_cpu_sec() if on_linux() else None
        cpu = (time.process_time(), server, machine)
        self.marks.append(_Mark(cpu, backends, self.tally.requests, self.recorder.cycles))

    def ms_per_request(self) -> float | None:
        return self._per(_between(_CLIENT), lambda mark: mark.requests)

    def ms_per_cycle(self, which: int) -> float | None:
        return self._per(_between(which), lambda mark: mark.cycles)

    def database_ms_per_cycle(self) -> float | None:
        return self._per(_backends_between, lambda mark: mark.cycles)

    def _per(
        self,
        spent_sec: Callable[[_Mark, _Mark], float | None],
        count: Callable[[_Mark], int],
    ) -> float | None:
        if len(self.marks) < 2:
            return None
        first, last = self.marks[:2]
        spent, done = spent_sec(first, last), count(last) - count(first)
        return round(spent * 1000 / done, 3) if spent is not None and done > 0 else None


def _between(which: int) -> Callable[[_Mark, _Mark], float | None]:
    """The CPU seconds of one of a mark's three figures from `first` to `last`."""

    def spent(first: _Mark, last: _Mark) -> float | None:
        before, after = first.cpu_sec[which], last.cpu_sec[which]
        return None if before is None or after is None else after - before

    return spent


def _backends_between(first: _Mark, last: _Mark) -> float | None:
    """The database's backends' CPU seconds from `first` to `last`: a backend born between them
    counts from zero; one gone before `last` is lost."""
    if first.backends is None or last.backends is None:
        return None
    return sum(sec - first.backends.get(pid, 0.0) for pid, sec in last.backends.items())
