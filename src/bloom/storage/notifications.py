"""Cross-process wake-ups on PostgreSQL: NOTIFY after a change, LISTEN for the others' changes.

Several runtime processes (or replicas) can share one database; a claim waiting in one process
must wake when a task is queued through another. Sending is coalesced and happens after the
commit, off the request path: a burst of changes costs one NOTIFY, and a lost notification only
delays waiters until their periodic recheck.
"""

import asyncio
from collections.abc import Callable

import psycopg
import structlog
from sqlalchemy import text

from bloom.storage.database import Database, DatabaseTarget

log = structlog.get_logger(__name__)
QUEUE_CHANNEL = "bloom_queue"


class QueuePublisher:
    """`publish()` requests a NOTIFY; at most one is in flight, and requests made meanwhile are
    folded into the next one."""

    def __init__(self, db: Database, coalesce_sec: float = 0.002):
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
                async with self._db.engine.connect() as conn:
                    await conn.execute(text(f"NOTIFY {QUEUE_CHANNEL}"))
                    await conn.commit()
            except Exception as exc:  # waiters elsewhere fall back to their recheck
                log.warning("queue_notify_failed", error=str(exc))


class QueueListener:
    """Calls `on_notify` for every queue notification; reconnects after a lost connection (and
    calls `on_notify` then too, since notifications sent meanwhile are lost)."""

    def __init__(
        self, target: DatabaseTarget, on_notify: Callable[[], None], retry_sec: float = 1.0
    ):
        self._conninfo = target.sync_url.set(drivername="postgresql").render_as_string(
            hide_password=False
        )
        self._on_notify = on_notify
        self._retry_sec = retry_sec
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        self._task = asyncio.current_task()
        while not self._stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {QUEUE_CHANNEL}")
                    self._on_notify()
                    async for _ in conn.notifies():
                        self._on_notify()
            except (psycopg.Error, OSError) as exc:
                log.warning("queue_listener_disconnected", error=str(exc))
            if not self._stopping.is_set():
                await asyncio.sleep(self._retry_sec)

    def stop(self) -> None:
        """Stop now: waiting for notifications cannot be interrupted any other way."""
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
