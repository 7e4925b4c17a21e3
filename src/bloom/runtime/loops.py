"""Background loops started with the app: each a small object with `run()` and `stop()`."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from bloom.db.availability import DatabaseUnavailable
from bloom.domain.clock import Clock
from bloom.runtime.services.reaping import LeaseReaper

log = structlog.get_logger(__name__)
OUTAGE_MAX_DELAY_SEC = 10.0


def outage_delay(interval_sec: float, failures: int) -> float:
    """The pause after `failures` passes in a row found the database unreachable: doubling from
    the loop's interval, to at most OUTAGE_MAX_DELAY_SEC (a slow reaper costs nothing then: the
    leases get a full TTL when the database is back)."""
    return min(interval_sec * 2.0 ** (failures - 1), max(interval_sec, OUTAGE_MAX_DELAY_SEC))


class Loop(Protocol):
    async def run(self) -> None: ...

    def stop(self) -> None: ...


class ReaperLoop:
    """Runs the lease reaper every `interval_sec`, and sooner when a lease is due sooner."""

    MIN_DELAY_SEC = 0.2

    def __init__(self, reaper: LeaseReaper, interval_sec: float, clock: Clock):
        self.reaper = reaper
        self.interval_sec = interval_sec
        self.clock = clock
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        outages = 0
        while not self._stopping.is_set():
            delay = self.interval_sec
            try:
                expired = await self.reaper.reap_once()
                if expired:
                    log.info("leases_expired", count=expired)
                if expired >= self.reaper.batch:
                    continue
                next_expiry = await self.reaper.next_expiry()
                if next_expiry is not None:
                    due_in = (next_expiry - self.clock()) / 1000 + 0.01
                    delay = max(self.MIN_DELAY_SEC, min(delay, due_in))
                outages = 0
            except DatabaseUnavailable:  # said once, by the database's availability
                outages += 1
                delay = outage_delay(self.interval_sec, outages)
            except Exception:
                log.exception("reaper_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    def stop(self) -> None:
        self._stopping.set()


class PeriodicLoop:
    """Runs `step` at once and then every `interval_sec`; a failing step is logged, not fatal.
    Stopping cancels a step in flight: steps are transactions, so a cancelled one changes
    nothing (a worker sync waiting out Membridge's retries need not hold up a shutdown)."""

    def __init__(self, name: str, step: Callable[[], Awaitable[object]], interval_sec: float):
        self.name = name
        self.step = step
        self.interval_sec = interval_sec
        self._stopping = asyncio.Event()
        self._current: asyncio.Future[object] | None = None

    async def run(self) -> None:
        outages = 0
        while not self._stopping.is_set():
            delay = self.interval_sec
            self._current = asyncio.ensure_future(self.step())
            try:
                await self._current
                outages = 0
            except asyncio.CancelledError:
                if not self._stopping.is_set():
                    raise
            except DatabaseUnavailable:  # said once, by the database's availability
                outages += 1
                delay = outage_delay(self.interval_sec, outages)
            except Exception:
                log.exception("loop_step_failed", loop=self.name)
            finally:
                self._current = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    def stop(self) -> None:
        self._stopping.set()
        if self._current is not None:
            self._current.cancel()


class LoopRunner:
    """Starts loops as tasks; on stop asks each to stop, then cancels what lingers."""

    def __init__(self, loops: list[Loop], grace_sec: float = 5.0):
        self.loops = loops
        self.grace_sec = grace_sec
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(loop.run(), name=type(loop).__name__) for loop in self.loops
        ]

    async def stop(self) -> None:
        for loop in self.loops:
            loop.stop()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=self.grace_sec)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
