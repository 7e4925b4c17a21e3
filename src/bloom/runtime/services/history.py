"""The queue's recent history for the dashboard: depth sampled once a minute (whichever process
or replica gets there first), and the overview of a window: counts, workers, leases, throughput
per bucket (from the results kept per minute, for buckets of whole minutes), depth, failure
rate."""

from bloom.domain.clock import Clock
from bloom.domain.history import (
    MINUTE_MS,
    SAMPLE_RETENTION_MS,
    Bucket,
    DepthSample,
    Overview,
    Window,
    failure_rate,
    minute_of,
)
from bloom.domain.states import TaskStatus
from bloom.runtime.storage.repositories import RuntimeDatabase

__all__ = ["Bucket", "DepthSample", "HistoryService", "Overview"]


class HistoryService:
    def __init__(self, db: RuntimeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def sample(self) -> None:
        """Record the queue's depth for the current minute unless a sample of it is stored
        already (the first one of the minute stays), and delete samples older than eight days."""
        now = self.clock()
        async with self.db.read() as tx:
            counted, _ = await tx.counts.totals()
        queued = counted[TaskStatus.QUEUED]
        running = counted[TaskStatus.LEASED] + counted[TaskStatus.RUNNING]
        async with self.db.write() as tx:
            await tx.samples.add(DepthSample(minute_of(now), queued, running))
            await tx.samples.prune(before=now - SAMPLE_RETENTION_MS)

    async def overview(self, *, window_ms: int, bucket_ms: int) -> Overview:
        """The queue now and over the window ending now, in buckets of `bucket_ms` aligned on
        its multiples (the last one holds now and is still filling)."""
        window = Window.ending_at(self.clock(), window_ms=window_ms, bucket_ms=bucket_ms)
        async with self.db.read() as tx:
            counted, _ = await tx.counts.totals()
            workers_total, workers_online = await tx.workers.totals()
            active_leases = await tx.leases.count_active()
            oldest_queued_at = await tx.tasks.oldest_queued_at()
            if bucket_ms % MINUTE_MS == 0:  # kept per minute (`result_minutes`)
                per_bucket = await tx.rollups.throughput(
                    first=window.first, end=window.end, bucket_ms=bucket_ms
                )
            else:  # counted from the results themselves
                per_bucket = await tx.results.throughput(
                    first=window.first, end=window.end, bucket_ms=bucket_ms
                )
            depth = await tx.samples.between(window.first, window.end)
        throughput = window.fill(per_bucket)
        return Overview(
            counts=counted,
            workers_total=workers_total,
            workers_online=workers_online,
            active_leases=active_leases,
            oldest_queued_at=oldest_queued_at,
            window_ms=window_ms,
            bucket_ms=bucket_ms,
            throughput=throughput,
            depth=depth,
            failure_rate=failure_rate(throughput),
        )
