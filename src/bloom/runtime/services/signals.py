"""In-process wake-ups: for waiting claims (the queue), and for followers of a task's events."""

import asyncio
import weakref
from collections.abc import Callable, Iterable


class QueueSignal:
    """Wakes every waiting claim when work may have become available: a task was queued, a slot
    freed, a lease assigned. Waiters take `waiter()` *before* looking at the queue, so a change
    that lands between their look and their wait still wakes them.

    `changed()` is for the services (after their commit): it wakes this process's waiters and,
    through `publish`, the other processes sharing the database. `wake()` is local only: it is
    what a notification from another process calls.
    """

    def __init__(self, publish: Callable[[], None] | None = None) -> None:
        self._event = asyncio.Event()
        self.publish = publish

    def waiter(self) -> asyncio.Event:
        return self._event

    def wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def changed(self) -> None:
        self.wake()
        if self.publish is not None:
            self.publish()


class EventSignal:
    """Wakes the followers of a task's events when events were appended to it. Like
    `QueueSignal`, a follower takes `waiter(task_id)` before reading, and `changed(task_id)`
    (after the commit) wakes this process's followers and, through `publish`, the other
    processes'; `wake(task_ids)` is local only, and `wake(None)` wakes every follower (when
    notifications may have been lost).

    Only followers keep their task's event alive: a task nobody follows costs nothing here.
    """

    def __init__(self, publish: Callable[[str], None] | None = None) -> None:
        self._events: weakref.WeakValueDictionary[str, asyncio.Event] = (
            weakref.WeakValueDictionary()
        )
        self.publish = publish

    def waiter(self, task_id: str) -> asyncio.Event:
        event = self._events.get(task_id)
        if event is None:
            event = self._events[task_id] = asyncio.Event()
        return event

    def wake(self, task_ids: Iterable[str] | None) -> None:
        if task_ids is None:
            woken = list(self._events.values())
            self._events.clear()
        else:
            woken = [e for e in (self._events.pop(task_id, None) for task_id in task_ids) if e]
        for event in woken:
            event.set()

    def changed(self, task_id: str) -> None:
        self.wake((task_id,))
        if self.publish is not None:
            self.publish(task_id)


async def wait_for_signal(event: asyncio.Event, seconds: float) -> bool:
    """True when woken, False when `seconds` passed first."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def wait_for_any(events: Iterable[asyncio.Event], seconds: float) -> bool:
    """True when any of `events` is set, False when `seconds` passed first."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return bool(done)
