"""Cross-process wake-ups on PostgreSQL: NOTIFY after a change, LISTEN for the others' changes.

Several runtime processes (or replicas) can share one database; a claim waiting in one process
must wake when a task is queued through another. Sending is coalesced and happens after the
commit, off the request path: a burst of changes costs one NOTIFY, and a lost notification only
delays waiters until their periodic recheck.
"""

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog
from sqlalchemy import text

from bloom.storage.database import Database, DatabaseTarget

log = structlog.get_logger(__name__)
QUEUE_CHANNEL = "bloom_queue"
_NOTIFY = text(f"NOTIFY {QUEUE_CHANNEL}")


class QueuePublisher:
    """`publish()` requests a NOTIFY; at most one is in flight, and requests made meanwhile are
    folded into the next one."""

    def __init__(self, db: Database[Any], coalesce_sec: float = 0.002):
        self._db = db
        self._coalesce_sec = coalesce_sec
        self._requested = False
        self._sender: asyncio.Task[None] | None = None

    def publish(self) -> None:
        self._requested = True
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        while self._requested:
            await asyncio.sleep(self._coalesce_sec)
            self._requested = False
            try:
                async with self._db.session(write=False) as session:  # autocommit: 1 round trip
                    await session.execute(_NOTIFY)
            except Exception as exc:  # waiters elsewhere fall back to their recheck
                log.warning("queue_notify_failed", error=str(exc))


class QueueListener:
    """Calls `on_notify` for every queue notification; reconnects after a lost connection (and
    calls `on_notify` then too, since notifications sent meanwhile are lost)."""

    def __init__(
        self, target: DatabaseTarget, on_notify: Callable[[], None], retry_sec: float = 1.0
    ):
        self._dsn = target.dsn
        self._on_notify = on_notify
        self._retry_sec = retry_sec
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._listen()
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("queue_listener_disconnected", error=str(exc))
            if not self._stopping.is_set():
                await _first_of(asyncio.sleep(self._retry_sec), self._stopping.wait())

    async def _listen(self) -> None:
        """Listen on one connection until it is lost or we stop."""
        lost = asyncio.Event()
        conn = await asyncpg.connect(self._dsn)
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(QUEUE_CHANNEL, self._notified)
            self._on_notify()
            await _first_of(lost.wait(), self._stopping.wait())
        finally:
            if not conn.is_closed():
                await conn.close()

    def _notified(self, *_: Any) -> None:
        self._on_notify()

    def stop(self) -> None:
        self._stopping.set()


async def _first_of(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
