"""The queue's recent history as the dashboard shows it: throughput per bucket, queue depth per
minute, and the failure rate, over a window ending now (time passed in)."""

from collections.abc import Iterable
from dataclasses import dataclass

from bloom.domain.errors import Invalid

MINUTE_MS = 60_000
SAMPLE_RETENTION_MS = 8 * 86_400_000
"""Queue depth samples older than this are deleted."""
MAX_BUCKETS = 2_000
"""A window of more buckets than this is refused (a chart has no use for them)."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """Results completed in [start, start + bucket_ms): succeeded, and anything else."""

    start: int
    succeeded: int
    failed: int


@dataclass(frozen=True, slots=True)
class DepthSample:
    """The queue at one minute: tasks queued, and tasks leased or running."""

    at: int
    queued: int
    running: int


@dataclass(frozen=True, slots=True)
class Overview:
    counts: dict[str, int]
    """Tasks per status: every status, 0 when none."""
    workers_total: int
    workers_online: int
    active_leases: int
    oldest_queued_at: int | None
    """created_at of the oldest queued task."""
    window_ms: int
    bucket_ms: int
    throughput: list[Bucket]
    """Every bucket of the window, oldest first, empty ones included."""
    depth: list[DepthSample]
    """The samples inside the window, oldest first."""
    failure_rate: float | None
    """Failed results / all results in the window; None when there were none."""


@dataclass(frozen=True, slots=True)
class Window:
    """The buckets of a window: aligned on multiples of `bucket_ms` (so a chart's buckets do not
    shift between two refreshes), the last one the bucket holding `now`."""

    first: int
    """Where the oldest bucket starts."""
    bucket_ms: int
    buckets: int

    @classmethod
    def ending_at(cls, now: int, *, window_ms: int, bucket_ms: int) -> "Window":
        if bucket_ms <= 0 or window_ms <= 0:
            raise Invalid("window_ms and bucket_ms must be positive")
        if bucket_ms > window_ms:
            raise Invalid("bucket_ms must not exceed window_ms")
        buckets = -(-window_ms // bucket_ms)
        if buckets > MAX_BUCKETS:
            raise Invalid(f"A window holds at most {MAX_BUCKETS} buckets")
        current = now - now % bucket_ms
        return cls(current - (buckets - 1) * bucket_ms, bucket_ms, buckets)

    @property
    def end(self) -> int:
        """Where the newest bucket ends (exclusive)."""
        return self.first + self.buckets * self.bucket_ms

    def fill(self, counted: Iterable[tuple[int, int, int]]) -> list[Bucket]:
        """Every bucket, oldest first, from (bucket number from `first`, succeeded, failed)
        for the buckets that had results."""
        by_index = {index: (ok, failed) for index, ok, failed in counted}
        return [
            Bucket(self.first + i * self.bucket_ms, *by_index.get(i, (0, 0)))
            for i in range(self.buckets)
        ]


def failure_rate(buckets: Iterable[Bucket]) -> float | None:
    succeeded = failed = 0
    for bucket in buckets:
        succeeded += bucket.succeeded
        failed += bucket.failed
    total = succeeded + failed
    return failed / total if total else None


def minute_of(now: int) -> int:
    """The sample key of the minute holding `now`."""
    return now - now % MINUTE_MS
