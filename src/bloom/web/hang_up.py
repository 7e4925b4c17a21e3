"""Knowing at once that a long-polling client hung up, without looking every few seconds."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from starlette.requests import Request


@asynccontextmanager
async def hang_up_watch(request: Request) -> AsyncIterator[asyncio.Event]:
    """An event set when the client of `request` (its body read already) disconnects, watched
    for as long as the block runs. Once the body is read, the ASGI server's next message is the
    disconnect: waiting for it costs nothing, where checking `is_disconnected` every 2 s for
    2,000 waiting claims woke 1,000 of them a second (a tenth of a core, issue 31)."""
    gone = asyncio.Event()

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.create_task(watch())
    try:
        yield gone
    finally:
        watcher.cancel()
        with suppress(asyncio.CancelledError):
            await watcher
