"""Depth mode: claim latency with 1k, 100k, 1M… tasks queued.

For each depth, smallest first, the queue is brought to exactly that many queued tasks by bulk
insert straight into the database (only the difference: larger depths build on smaller ones),
planner statistics are refreshed (and SQLite's log checkpointed), then a few simulated workers
claim and complete tasks one after another, and the claim requests are timed. The claims take
tasks from the queue, so a depth is measured between `depth` and `depth - claims` queued tasks.
"""

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bloom.bench.api import RuntimeApi, Tally
from bloom.bench.http import Endpoint
from bloom.bench.stats import Latency
from bloom.db.database import DatabaseTarget
from bloom.runtime.storage import bulk

FillProgress = Callable[[int, int], bulk.Progress]
"""Given (depth, rows to insert), returns the callback told of each inserted chunk."""

WARMUP_CLAIMS_PER_WORKER = 2


@dataclass(frozen=True, slots=True)
class DepthResult:
    depth: int
    inserted: int
    fill_sec: float
    claim: Latency
    empty_claims: int
    p50_ratio: float | None


@dataclass(frozen=True, slots=True)
class DepthReport:
    workers: int
    results: list[DepthResult]
    requests: int
    errors: int
    error_samples: list[str]


def claims_at(depth: int, claims: int, workers: int) -> int:
    """Claims measured at `depth`: at most half the queue, leaving room for the warm-up."""
    return max(0, min(claims, depth // 2 - workers * WARMUP_CLAIMS_PER_WORKER))


async def run_depths(
    endpoint: Endpoint,
    target: DatabaseTarget,
    depths: list[int],
    *,
    claims: int = 300,
    workers: int = 4,
    on_fill: FillProgress | None = None,
) -> DepthReport:
    """Fill the queue to each depth in turn and time claims there."""
    run = uuid.uuid4().hex[:8]
    names = [f"bench-depth-{run}-{i}" for i in range(workers)]
    tally = Tally()
    apis = [RuntimeApi(endpoint, tally) for _ in range(workers)]
    results: list[DepthResult] = []
    try:
        registered = await asyncio.gather(
            *(api.register_worker(name) for api, name in zip(apis, names, strict=True))
        )
        if not all(registered):
            raise RuntimeError(f"could not register the simulated workers: {tally.samples}")
        for depth in sorted(set(depths)):
            started = time.perf_counter()
            progress = on_fill(depth, depth) if on_fill is not None else None
            inserted = await asyncio.to_thread(bulk.fill_queue, target, depth, progress)
            await asyncio.to_thread(bulk.settle, target)
            fill_sec = time.perf_counter() - started
            count = claims_at(depth, claims, workers)
            shares = [count // workers + (i < count % workers) for i in range(workers)]
            measured = await asyncio.gather(
                *(
                    _claim_and_complete(api, name, n)
                    for api, name, n in zip(apis, names, shares, strict=True)
                )
            )
            latencies = [seconds for samples, _ in measured for seconds in samples]
            claim = Latency.of(latencies)
            first = results[0].claim.p50_ms if results else claim.p50_ms
            ratio = round(claim.p50_ms / first, 2) if claim.p50_ms and first else None
            empty = sum(empties for _, empties in measured)
            results.append(DepthResult(depth, inserted, round(fill_sec, 2), claim, empty, ratio))
        await asyncio.gather(
            *(api.remove_worker(name) for api, name in zip(apis, names, strict=True))
        )
    finally:
        for api in apis:
            api.close()
    return DepthReport(workers, results, tally.requests, tally.errors, tally.samples)


async def _claim_and_complete(api: RuntimeApi, name: str, count: int) -> tuple[list[float], int]:
    """Claim and at once complete, `count` times after a short warm-up; the claim latencies
    and how many claims found nothing to take."""
    latencies: list[float] = []
    empty = 0
    for i in range(WARMUP_CLAIMS_PER_WORKER + count):
        sent = time.perf_counter()
        claim = await api.claim(name, 0)
        elapsed = time.perf_counter() - sent
        if i >= WARMUP_CLAIMS_PER_WORKER:
            latencies.append(elapsed)
        if claim is None:
            empty += 1
            continue
        await api.complete(claim)
    return latencies, empty
