"""Cross-process wake-ups on PostgreSQL: NOTIFY after a change, LISTEN for the others' changes.

Several runtime processes (or replicas) can share one database; a claim waiting in one process
must wake when a task is queued through another, and a follower of a task's events when another
process appended some. Sending is coalesced and happens after the commit, off the request path:
a burst of changes costs one NOTIFY, and a lost notification only delays waiters until their
periodic recheck.
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
import structlog
from sqlalchemy import Text, bindparam, func, literal_column, select

from bloom.db.availability import DatabaseUnavailable
from bloom.db.database import CONNECT_TIMEOUT_SEC, Database, DatabaseTarget

log = structlog.get_logger(__name__)
QUEUE_CHANNEL = "bloom_queue"
EVENTS_CHANNEL = "bloom_events"
_NOTIFY = select(
    func.pg_notify(literal_column(f"'{QUEUE_CHANNEL}'"), bindparam("b_payload", type_=Text()))
)
_NOTIFY_EVENTS = select(
    func.pg_notify(literal_column(f"'{EVENTS_CHANNEL}'"), bindparam("b_payload", type_=Text()))
)
PAYLOAD_BYTES = 7000  # PostgreSQL's limit is 8000
MAX_RETRY_SEC = 5.0
MAX_NAMED_WORKERS = 100
"""A wake naming more workers than this wakes everyone instead (and fits a NOTIFY)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """Which waiting claims a change is for: `count` of them in the order they began waiting
    (None: every one), and every claim of the `workers` named (a lease assigned to one, a slot
    it freed)."""

    count: int | None = 0
    workers: frozenset[str] = frozenset()

    @classmethod
    def for_tasks(cls, keepers: Iterable[str | None]) -> "Wake":
        """The wake for ready tasks, given each one's keeper (None: nobody keeps it): a counted
        claim for each task nobody keeps, and the claims of each keeper."""
        count, named = 0, set()
        for keeper in keepers:
            if keeper is None:
                count += 1
            else:
                named.add(keeper)
        return cls(count) | cls(0, frozenset(named))

    def __or__(self, other: "Wake") -> "Wake":
        count = None if self.count is None or other.count is None else self.count + other.count
        workers = self.workers | other.workers
        if len(workers) > MAX_NAMED_WORKERS:
            return EVERYONE
        return Wake(count, workers)

    def payload(self, origin: str) -> str:
        """The NOTIFY payload, naming the process that sent it (which is told too, and knows
        already). Everyone is named by leaving out the count, also for a wake too long to fit."""
        text = orjson.dumps({"o": origin, "n": self.count, "w": sorted(self.workers)}).decode()
        if len(text.encode()) <= PAYLOAD_BYTES:
            return text
        return orjson.dumps({"o": origin}).decode()

    @classmethod
    def parse(cls, payload: str) -> tuple["Wake", str | None]:
        """A notification's wake and sender; anything unreadable (an older process's empty
        payload too) wakes everyone, as every notification used to."""
        try:
            data = orjson.loads(payload)
            origin = data.get("o")
            count, workers = data.get("n"), data.get("w", [])
        except (orjson.JSONDecodeError, AttributeError):
            return EVERYONE, None
        origin = origin if isinstance(origin, str) else None
        if not isinstance(count, int) or not isinstance(workers, list):
            return EVERYONE, origin
        return cls(max(count, 0), frozenset(str(worker) for worker in workers)), origin


EVERYONE = Wake(None)


class QueuePublisher:
    """`publish(wake)` requests a NOTIFY carrying the wake; at most one is in flight, and the
    wakes requested meanwhile are folded into the next one."""

    def __init__(self, db: Database[Any], origin: str, coalesce_sec: float = 0.002):
        self._db = db
        self._origin = origin
        self._coalesce_sec = coalesce_sec
        self._pending: Wake | None = None
        self._sender: asyncio.Task[None] | None = None

    def publish(self, wake: Wake) -> None:
        self._pending = wake if self._pending is None else self._pending | wake
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        while self._pending is not None:
            await asyncio.sleep(self._coalesce_sec)
            wake, self._pending = self._pending, None
            try:
                async with self._db.connection(
                    write=False
                ) as connection:  # autocommit: 1 round trip
                    await connection.execute(_NOTIFY, {"b_payload": wake.payload(self._origin)})
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
    """Calls `on_notify` with the wake of every queue notification another process sent (this
    process's `origin` woke its own claims already) and, when given, `on_events` with the task
    ids of every events notification. Once listening (at start, and again after a lost
    connection) it calls `on_listening`, since notifications sent meanwhile are lost: the
    runtime rechecks the queue then (waking only the claims the work is for: at a reconnect,
    waking all 2,000 waiting claims ran 2,000 transactions) and wakes every events follower."""

    def __init__(
        self,
        target: DatabaseTarget,
        on_notify: Callable[[Wake], None],
        on_listening: Callable[[], Awaitable[None]],
        retry_sec: float = 1.0,
        *,
        origin: str = "",
        on_events: Callable[[list[str] | None], None] | None = None,
    ):
        self._dsn = target.dsn
        self._origin = origin
        self._on_notify = on_notify
        self._on_listening = on_listening
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
            await self._on_listening()
            await _first_of(lost.wait(), self._stopping.wait())
        finally:
            if not conn.is_closed():
                await conn.close()

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        wake, origin = Wake.parse(payload)
        if origin is None or origin != self._origin:
            self._on_notify(wake)

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
