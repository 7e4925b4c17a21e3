"""PostgreSQL LISTEN: wake-ups from the other runtime processes sharing the database."""

import asyncio
from collections.abc import Callable

import psycopg
import structlog

from bloom.storage.database import DatabaseTarget
from bloom.storage.repositories import QUEUE_CHANNEL

log = structlog.get_logger(__name__)


class QueueListener:
    """Calls `on_notify` for every queue notification; reconnects after a lost connection (and
    calls `on_notify` then too, since notifications sent meanwhile are lost)."""

    def __init__(
        self, target: DatabaseTarget, on_notify: Callable[[], None], retry_sec: float = 1.0
    ):
        self._conninfo = target.async_url.set(drivername="postgresql").render_as_string(
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
