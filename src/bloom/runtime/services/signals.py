"""In-process wake-ups: for waiting claims (the queue), and for followers of a task's events."""

import asyncio
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice

from bloom.runtime.storage.notifications import EVERYONE as EVERYONE
from bloom.runtime.storage.notifications import Wake as Wake

ONE = Wake(1)


class QueueSignal:
    """Wakes waiting claims when work may have become available, as few as the change needs.

    A claim registers with `waiting(worker_id)` *before* it looks at the queue, so a change that
    lands between its look and its wait still wakes it. A change wakes, per its `Wake`, that many
    claims, the latest to begin waiting first (the oldest are the nearest to the end of their
    long poll), and every claim of the workers it names: a new task wakes one claim, not all of
    them (2,000 waiting claims each ran a transaction per task). A claim whose worker can take
    nothing now (`able=False`: offline, paused, every slot taken) is passed over by counted
    wakes; its worker is named when a slot of its comes free. A woken claim that gets work passes
    one wake on (`passed_on`), since more may be waiting; one that finds none does not; one that
    ends without looking (its caller gone) passes its wake on. What no change announced, or a
    wake that reached a claim the work was not for (a context kept for another worker), is found
    by `LeaseService.wake_if_ready`, which wakes everyone.

    `changed()` is for the services (after their commit): it wakes this process's claims and,
    through `publish`, the other processes sharing the database. `wake()` is local only: it is
    what a notification from another process calls.
    """

    def __init__(self, publish: Callable[[Wake], None] | None = None) -> None:
        self._waiting: dict[asyncio.Event, tuple[str, bool]] = {}
        """Each waiting claim's event, worker and whether it can take work, in the order they
        began waiting."""
        self._any_change = asyncio.Event()
        self.publish = publish
        self.wakes = 0
        """Wakes so far, of any kind: a claim's hint whether the queue may have changed since a
        look found nothing (`LeaseService`)."""

    @property
    def waiters(self) -> int:
        """Claims of this process waiting now."""
        return len(self._waiting)

    @contextmanager
    def waiting(self, worker_id: str, *, able: bool = True) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiting[event] = (worker_id, able)
        try:
            yield event
        finally:
            self._waiting.pop(event, None)

    def any_change(self) -> asyncio.Event:
        """Set by the next change, whichever claims it wakes: for followers of a task's events,
        who learn of its end from it."""
        return self._any_change

    def wake(self, wake: Wake = EVERYONE) -> None:
        self.wakes += 1
        changed, self._any_change = self._any_change, asyncio.Event()
        changed.set()
        if wake.count is None:
            woken = list(self._waiting)
        else:
            named = (
                {e for e, (worker, _) in self._waiting.items() if worker in wake.workers}
                if wake.workers
                else set()
            )
            able = (e for e in reversed(self._waiting) if self._waiting[e][1] and e not in named)
            newest = islice(able, wake.count)
            woken = [*named, *newest]
        for event in woken:
            del self._waiting[event]
            event.set()

    def changed(self, wake: Wake = EVERYONE) -> None:
        self.wake(wake)
        if self.publish is not None:
            self.publish(wake)

    def passed_on(self) -> None:
        """A woken claim got work, or will not look: the next waiting claim looks too (this
        process only: each process was told of the change itself)."""
        self.wake(ONE)


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


async def wait_for_any(events: Iterable[asyncio.Event], seconds: float) -> bool:
    """True when any of `events` is set, False when `seconds` passed first."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return bool(done)
