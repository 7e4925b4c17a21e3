"""Latency summaries: nearest-rank percentiles over the samples of one run, in milliseconds."""

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-quantile (0 < q <= 1) of already sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True)
class Latency:
    """p50, p99 and mean of a set of durations, in milliseconds; None when there were no
    samples."""

    count: int
    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None = None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> "Latency":
        if not seconds:
            return cls(0, None, None)
        ordered = sorted(seconds)
        return cls(
            len(ordered),
            round(percentile(ordered, 0.50) * 1000, 3),
            round(percentile(ordered, 0.99) * 1000, 3),
            round(sum(ordered) * 1000 / len(ordered), 3),
        )

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "count": self.count,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "mean_ms": self.mean_ms,
        }


def ms_text(value: float | None, digits: int = 1) -> str:
    """Milliseconds for a table cell; "-" when there is no figure."""
    return "-" if value is None else f"{value:.{digits}f} ms"
