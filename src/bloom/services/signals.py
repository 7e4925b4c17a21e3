"""In-process wake-ups for waiting claims."""

import asyncio


class QueueSignal:
    """Wakes every waiting claim when work may have become available: a task was queued, a slot
    freed, a lease assigned. Waiters take `waiter()` *before* looking at the queue, so a change
    that lands between their look and their wait still wakes them."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        return self._event

    def wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()


async def wait_for_signal(event: asyncio.Event, seconds: float) -> bool:
    """True when woken, False when `seconds` passed first."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True
