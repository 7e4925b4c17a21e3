"""A task's live output: workers append events while they hold the lease; anyone follows them.

Appends are fenced like heartbeats (the lease must be the task's current one, live, and the
caller's) and numbered by the server: seq 1, 2, 3… per task, in arrival order, without gaps,
across all of the task's attempts. Following reads what is stored after a given seq, then waits
for more until the task has ended and everything was read.

Bounded: a task stores at most `max_bytes` of events (type and data, in UTF-8); what comes after
is dropped, once, with one `truncated` event saying how much and the limit (its counts kept up
to date), and the append still succeeds, so the run goes on. Each caller follows at most
`streams_per_caller` streams at a time in this process, and events of ended tasks are deleted
once older than the retention.

Every append with events, stored or dropped, is output: it dates the task's newest (`last_at`,
by which the reaper finds a run stalled, `bloom.domain.stall`) and ends its attempt's stall.
"""

import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from bloom.domain.clock import Clock
from bloom.domain.errors import NotFound, ServiceError, Throttled
from bloom.domain.models import Lease, TaskEvent
from bloom.domain.states import TERMINAL, TaskStatus
from bloom.runtime.services.fencing import live_lease
from bloom.runtime.services.signals import EventSignal, QueueSignal, wait_for_any
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase
from bloom.runtime.storage.repositories.events import Dropped

log = structlog.get_logger(__name__)

MAX_EVENTS = 500
"""Events per append."""
MAX_DATA_BYTES = 64 * 1024
"""An event's `data`, serialised as compact JSON."""
MAX_TYPE_CHARS = 64
PAGE = 500
"""Events read per query while following."""
TRUNCATED = "truncated"
"""The type of the one event that says a task's later events were dropped."""
MARKER_ROOM = 256
"""Bytes of the limit kept for that event, so that everything stored stays within it."""
PRUNE_BATCH = 5000
PRUNE_BATCHES = 20
"""Events deleted per transaction, and transactions per pass of the retention."""
STREAM_RETRY_AFTER_SEC = 5
# A NUL character, escaped (an odd number of backslashes before "u0000"): PostgreSQL's JSONB
# refuses it, so no database is given one.
_ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


class EventDataError(ServiceError):
    """Events the store cannot take (400; the API's validation says so first)."""


def serialise_data(data: Any) -> str:
    """`data` as the JSON text stored for it; EventDataError when it is too large or cannot be
    stored (integers beyond 64 bits, NUL characters)."""
    try:
        text = orjson.dumps(data)
    except orjson.JSONEncodeError:
        raise EventDataError("must be JSON with integers of at most 64 bits") from None
    if len(text) > MAX_DATA_BYTES:
        raise EventDataError(f"must be at most {MAX_DATA_BYTES} bytes as JSON, is {len(text)}")
    if b"\\u0000" in text and _ESCAPED_NUL.search(text):
        raise EventDataError("must not contain NUL characters (\\u0000)")
    return text.decode()


@dataclass(frozen=True, slots=True)
class NewEvent:
    type: str
    data: Any


@dataclass(frozen=True, slots=True)
class Appended:
    task_id: str
    last_seq: int
    accepted: int
    """How many of the events given were stored."""
    stored: int = 0
    """Rows written: those accepted, and the `truncated` event when this append made it."""


Row = tuple[str, str]
"""An event ready to store: its type, and its data as compact JSON text (`serialise_data`)."""


def prepared(events: Sequence[NewEvent]) -> list[Row]:
    """`events` checked (at most MAX_EVENTS) and serialised for `EventService.write`;
    EventDataError (400) otherwise."""
    if len(events) > MAX_EVENTS:
        raise EventDataError(f"at most {MAX_EVENTS} events per append")
    return [(event.type, serialise_data(event.data)) for event in events]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a task's events may take: bytes stored per task, how long those of an ended task are
    kept (0: for ever), streams followed at once per caller."""

    max_bytes: int = 64 * 1024 * 1024
    retention_ms: int = 30 * 86_400_000
    streams_per_caller: int = 8


class StreamSlot:
    """One of a caller's event streams, held until `release` (idempotent)."""

    def __init__(self, held: Counter[str], caller: str):
        self._held = held
        self._caller: str | None = caller

    def release(self) -> None:
        if self._caller is None:
            return
        self._held[self._caller] -= 1
        if self._held[self._caller] <= 0:
            del self._held[self._caller]
        self._caller = None


def fitting(sizes: Sequence[int], used: int, room: int) -> int:
    """How many of the first events, of `sizes` bytes each, fit in `room` beside `used`."""
    count = 0
    for size in sizes:
        used += size
        if used > room:
            break
        count += 1
    return count


def marker(limit: int, dropped: Dropped) -> dict[str, int]:
    """The `truncated` event's data: the limit, and what was dropped beyond it."""
    return {"limit_bytes": limit, "dropped_events": dropped.events, "dropped_bytes": dropped.bytes}


@dataclass(frozen=True, slots=True)
class Keepalive:
    """Nothing happened for a while; the connection is still wanted."""


@dataclass(frozen=True, slots=True)
class End:
    """Every event was sent and the task has ended (or the reader asked not to follow)."""

    status: TaskStatus | None


class EventService:
    def __init__(
        self,
        db: RuntimeDatabase,
        signal: EventSignal,
        queue: QueueSignal,
        clock: Clock,
        *,
        bounds: Bounds = Bounds(),
        keepalive_sec: float = 15.0,
        recheck_sec: float = 2.0,
    ):
        """`signal` wakes followers when events arrive, `queue` when task states change (a
        task's end is one); `recheck_sec` bounds the wait when a wake-up is lost."""
        self.db = db
        self.signal = signal
        self.queue = queue
        self.clock = clock
        self.bounds = bounds
        self.keepalive_sec = keepalive_sec
        self.recheck_sec = recheck_sec
        self._streams: Counter[str] = Counter()

    async def append(
        self,
        task_id: str,
        *,
        lease_id: str,
        worker_id: str | None,
        events: Sequence[NewEvent],
    ) -> Appended:
        """Store `events` after the task's last one, in one transaction, if `lease_id` is the
        task's live lease (and `worker_id`'s, when given), as many as fit within the task's
        bytes; the rest are dropped (the first time with a `truncated` event). Returns the last
        seq and how many of `events` were stored."""
        rows = prepared(events)
        now = self.clock()
        async with self.db.write() as tx:
            # The task's row lock serialises appends to it (PostgreSQL; SQLite has one writer),
            # and is taken first, so the fence below sees any ending that committed meanwhile
            # and the tally in `write` stays true until this transaction commits its own counts.
            # A task not in flight is not locked: the fence refuses it.
            await tx.tasks.lock_in_flight(task_id)
            _, lease = await live_lease(tx, task_id, lease_id, worker_id, now)
            appended = await self.write(tx, task_id, lease, rows, now)
            if rows and lease.stalled_at is not None:  # found stalled, and printing again
                await tx.stalls.unstall(lease.id)
        if appended.stored:
            self.signal.changed(task_id)
        return appended

    async def write(
        self, tx: Repositories, task_id: str, lease: Lease, rows: Sequence[Row], now: int
    ) -> Appended:
        """`rows` (from `prepared`) stored in `tx` under `lease`, as many as fit within the
        task's bytes, the rest dropped and counted. The caller holds the task's row lock (or the
        only writer) and has fenced `lease`: the events endpoint, and a complete that carries
        its attempt's last events. Announce what it stored (`announce`) once `tx` commits."""
        tally = await tx.events.tally(task_id)
        if not rows:
            return Appended(task_id, tally.last_seq, 0)
        sizes = [len(kind.encode()) + len(data.encode()) for kind, data in rows]
        limit = self.bounds.max_bytes
        truncated = tally.marker_seq is not None
        kept = 0 if truncated else fitting(sizes, tally.bytes, limit - MARKER_ROOM)
        dropped = Dropped(len(rows) - kept, sum(sizes[kept:]))
        stored, marker_seq = list(rows[:kept]), None
        if dropped.events and not truncated:
            stored.append((TRUNCATED, orjson.dumps(marker(limit, dropped)).decode()))
            marker_seq = tally.last_seq + len(stored)
            log.warning("task_events_truncated", task_id=task_id, limit_bytes=limit)
        if stored:
            await tx.events.append(
                task_id,
                last_seq=tally.last_seq,
                lease_id=lease.id,
                worker_id=lease.worker_id,
                events=stored,
                now=now,
            )
        total = await tx.events.count(
            task_id, stored=sum(sizes[:kept]), dropped=dropped, marker_seq=marker_seq, now=now
        )
        if tally.marker_seq is not None:  # truncated before: its marker counts this too
            await tx.events.rewrite(task_id, tally.marker_seq, marker(limit, total))
        return Appended(task_id, tally.last_seq + len(stored), kept, stored=len(stored))

    def announce(self, task_id: str) -> None:
        """After the commit of a `write` that stored events: wake the task's followers."""
        self.signal.changed(task_id)

    async def prune(self) -> int:
        """Delete the events of ended tasks older than the retention, a batch per transaction,
        at most PRUNE_BATCHES of them; how many were deleted. Replicas may run it at once: each
        batch deletes what is still there."""
        if not self.bounds.retention_ms:
            return 0
        before, pruned = self.clock() - self.bounds.retention_ms, 0
        for _ in range(PRUNE_BATCHES):
            async with self.db.write() as tx:
                deleted = await tx.events.prune(before, PRUNE_BATCH)
            pruned += deleted
            if deleted < PRUNE_BATCH:
                break
        if pruned:
            log.info("task_events_pruned", count=pruned)
        return pruned

    def open_stream(self, caller: str) -> StreamSlot:
        """A slot for one more stream of `caller`'s (release it when the stream ends); Throttled
        (429) when the caller already follows `streams_per_caller` streams."""
        if self._streams[caller] >= self.bounds.streams_per_caller:
            raise Throttled(
                f"Too many event streams open (at most {self.bounds.streams_per_caller} per "
                "caller): close one, or try again later",
                retry_after_sec=STREAM_RETRY_AFTER_SEC,
            )
        self._streams[caller] += 1
        return StreamSlot(self._streams, caller)

    async def after(self, task_id: str, seq: int, limit: int = PAGE) -> list[TaskEvent]:
        """The task's events with a seq above `seq`, in order."""
        async with self.db.read() as tx:
            return await tx.events.after(task_id, seq, limit)

    async def status(self, task_id: str) -> TaskStatus:
        """The task's status; NotFound when there is no such task."""
        async with self.db.read() as tx:
            status = await tx.tasks.status(task_id)
        if status is None:
            raise NotFound("Task not found")
        return status

    async def follow(
        self, task_id: str, *, after: int = 0, follow: bool = True
    ) -> AsyncIterator[TaskEvent | Keepalive | End]:
        """The task's events after seq `after`, then (with `follow`) those that arrive, with a
        `Keepalive` after each quiet `keepalive_sec`; ends with `End` once the task has ended
        and every event was given (without `follow`: once the stored events were given)."""
        cursor = after
        quiet_since = time.monotonic()
        while True:
            waiters = (self.signal.waiter(task_id), self.queue.any_change())
            async with self.db.read() as tx:
                # Status first: no event is appended after a task ends (the lease fences it), so
                # when this status is terminal the read below gets the last events.
                status = await tx.tasks.status(task_id)
                batch = await tx.events.after(task_id, cursor, PAGE)
            for event in batch:
                yield event
            if batch:
                cursor = batch[-1].seq
                quiet_since = time.monotonic()
                if len(batch) == PAGE:
                    continue
            if not follow or status is None or status in TERMINAL:
                yield End(status)
                return
            quiet = time.monotonic() - quiet_since
            if quiet >= self.keepalive_sec:
                yield Keepalive()
                quiet_since, quiet = time.monotonic(), 0.0
            await wait_for_any(waiters, min(self.recheck_sec, self.keepalive_sec - quiet))
