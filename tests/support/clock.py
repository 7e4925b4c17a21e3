"""A clock the test moves by hand, so leases expire without anyone sleeping."""

import time


class FakeClock:
    def __init__(self, start_ms: int | None = None):
        self.now = start_ms if start_ms is not None else time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)
