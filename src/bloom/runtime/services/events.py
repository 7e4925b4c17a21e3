"""A task's live output: workers append events while they hold the lease; anyone follows them.

Appends are fenced like heartbeats (the lease must be the task's current one, live, and the
caller's) and numbered by the server: seq 1, 2, 3… per task, in arrival order, without gaps,
across all of the task's attempts. Following reads what is stored after a given seq, then waits
for more until the task has ended and everything was read.
"""

import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bloom.domain.clock import Clock
from bloom.domain.errors import NotFound, ServiceError
from bloom.domain.models import TaskEvent
from bloom.domain.states import TERMINAL, TaskStatus
from bloom.runtime.services.fencing import live_lease
from bloom.runtime.services.signals import EventSignal, QueueSignal, wait_for_any
from bloom.runtime.storage.repositories import RuntimeDatabase

MAX_EVENTS = 500
"""Events per append."""
MAX_DATA_BYTES = 64 * 1024
"""An event's `data`, serialised as compact JSON."""
MAX_TYPE_CHARS = 64
PAGE = 500
"""Events read per query while following."""
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
        keepalive_sec: float = 15.0,
        recheck_sec: float = 2.0,
    ):
        """`signal` wakes followers when events arrive, `queue` when task states change (a
        task's end is one); `recheck_sec` bounds the wait when a wake-up is lost."""
        self.db = db
        self.signal = signal
        self.queue = queue
        self.clock = clock
        self.keepalive_sec = keepalive_sec
        self.recheck_sec = recheck_sec

    async def append(
        self,
        task_id: str,
        *,
        lease_id: str,
        worker_id: str | None,
        events: Sequence[NewEvent],
    ) -> Appended:
        """Store `events` after the task's last one, in one transaction, if `lease_id` is the
        task's live lease (and `worker_id`'s, when given). Returns the last seq."""
        if len(events) > MAX_EVENTS:
            raise EventDataError(f"at most {MAX_EVENTS} events per append")
        rows = [(event.type, serialise_data(event.data)) for event in events]
        now = self.clock()
        async with self.db.write() as tx:
            # The task's row lock serialises appends to it (PostgreSQL; SQLite has one writer),
            # and is taken first, so the fence below sees any ending that committed meanwhile.
            # A task not in flight is not locked: the fence refuses it.
            await tx.tasks.lock_in_flight(task_id)
            _, lease = await live_lease(tx, task_id, lease_id, worker_id, now)
            last = await tx.events.last_seq(task_id)
            if rows:
                await tx.events.append(
                    task_id,
                    last_seq=last,
                    lease_id=lease.id,
                    worker_id=lease.worker_id,
                    events=rows,
                    now=now,
                )
        if rows:
            self.signal.changed(task_id)
        return Appended(task_id, last + len(rows), len(rows))

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
