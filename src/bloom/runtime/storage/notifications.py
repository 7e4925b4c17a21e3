"""Cross-process wake-ups on PostgreSQL: NOTIFY after a change, LISTEN for the others' changes.

Several runtime processes (or replicas) can share one database; a claim waiting in one process
must wake when a task is queued through another, and a follower of a task's events when another
process appended some. Sending is coalesced and happens after the commit, off the request path:
a burst of changes costs one NOTIFY, and a lost notification only delays waiters until their
periodic recheck.
"""

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
import structlog
from sqlalchemy import Text, bindparam, func, literal_column, select, text

from bloom.db.availability import DatabaseUnavailable
from bloom.db.database import CONNECT_TIMEOUT_SEC, Database, DatabaseTarget

log = structlog.get_logger(__name__)
QUEUE_CHANNEL = "bloom_queue"
EVENTS_CHANNEL = "bloom_events"
_NOTIFY = text(f"NOTIFY {QUEUE_CHANNEL}")
_NOTIFY_EVENTS = select(
    func.pg_notify(literal_column(f"'{EVENTS_CHANNEL}'"), bindparam("b_payload", type_=Text()))
)
PAYLOAD_BYTES = 7000  # PostgreSQL's limit is 8000
MAX_RETRY_SEC = 5.0


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
                async with self._db.connection(
                    write=False
                ) as connection:  # autocommit: 1 round trip
                    await connection.execute(_NOTIFY)
            except DatabaseUnavailable:
                pass  # said once, by the database's availability
            except Exception as exc:  # waiters elsewhere fall back to their recheck
                log.warning("queue_notify_failed", error=str(exc))


class EventsPublisher:
    """`publish(task_id)` requests a NOTIFY on the events channel naming that task; the tasks
    named while one is in flight go together in the next (newline-separated ids)."""

    def __init__(self, db: Database[Any], coalesce_sec: float = 0.002):
        self._db = db
        self._coalesce_sec = coalesce_sec
        self._pending: set[str] = set()
        self._sender: asyncio.Task[None] | None = None

    def publish(self, task_id: str) -> None:
        self._pending.add(task_id)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        while self._pending:
            await asyncio.sleep(self._coalesce_sec)
            task_ids, self._pending = self._pending, set()
            try:
                async with self._db.connection(write=False) as connection:
                    for payload in payloads(sorted(task_ids)):
                        await connection.execute(_NOTIFY_EVENTS, {"b_payload": payload})
            except DatabaseUnavailable:
                pass  # said once, by the database's availability
            except Exception as exc:  # followers elsewhere fall back to their recheck
                log.warning("events_notify_failed", error=str(exc))


def payloads(task_ids: Iterable[str]) -> list[str]:
    """Task ids, newline-separated, in payloads that fit a NOTIFY."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for task_id in task_ids:
        needed = len(task_id.encode()) + 1
        if current and size + needed > PAYLOAD_BYTES:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(task_id)
        size += needed
    if current:
        chunks.append("\n".join(current))
    return chunks


class QueueListener:
    """Calls `on_notify` for every queue notification and, when given, `on_events` with the
    task ids of every events notification; reconnects after a lost connection (and calls
    `on_notify()` and `on_events(None)` then too, since notifications sent meanwhile are lost)."""

    def __init__(
        self,
        target: DatabaseTarget,
        on_notify: Callable[[], None],
        retry_sec: float = 1.0,
        *,
        on_events: Callable[[list[str] | None], None] | None = None,
    ):
        self._dsn = target.dsn
        self._on_notify = on_notify
        self._on_events = on_events
        self._retry_sec = retry_sec
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        failures = 0  # in a row: one warning per outage, and a growing pause (to MAX_RETRY_SEC)
        while not self._stopping.is_set():
            try:
                await self._listen()
                failures = 0
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if not failures:
                    log.warning("queue_listener_disconnected", error=str(exc))
                failures += 1
            if not self._stopping.is_set():
                pause = min(self._retry_sec * 2 ** max(failures - 1, 0), MAX_RETRY_SEC)
                await _first_of(asyncio.sleep(pause), self._stopping.wait())

    async def _listen(self) -> None:
        """Listen on one connection until it is lost or we stop."""
        lost = asyncio.Event()
        conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_SEC)
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(QUEUE_CHANNEL, self._notified)
            if self._on_events is not None:
                await conn.add_listener(EVENTS_CHANNEL, self._events_notified)
            self._on_notify()
            if self._on_events is not None:
                self._on_events(None)
            await _first_of(lost.wait(), self._stopping.wait())
        finally:
            if not conn.is_closed():
                await conn.close()

    def _notified(self, *_: Any) -> None:
        self._on_notify()

    def _events_notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._on_events is not None:
            self._on_events(payload.split("\n"))

    def stop(self) -> None:
        self._stopping.set()


async def _first_of(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
