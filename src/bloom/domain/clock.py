"""Time, as the services see it: a callable returning epoch milliseconds (tests pass their own)."""

import time
from collections.abc import Callable

Clock = Callable[[], int]


def system_clock() -> int:
    return time.time_ns() // 1_000_000
