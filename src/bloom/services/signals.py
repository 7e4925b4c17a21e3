"""In-process wake-ups for waiting claims."""

import asyncio
from collections.abc import Callable


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


async def wait_for_signal(event: asyncio.Event, seconds: float) -> bool:
    """True when woken, False when `seconds` passed first."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True
