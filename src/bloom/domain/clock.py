"""Time, as the services see it: a callable returning epoch milliseconds (tests pass their own)."""

import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], int]


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def utc_text(at_ms: int) -> str:
    """An instant (epoch ms) as people and stored texts write it: ISO 8601 UTC, to the second."""
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
