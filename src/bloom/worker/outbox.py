"""A run's events on their way to the runtime: kept in order across an outage (within a bound),
posted in batches, the last of them handed to the complete; and the fence: an answer that says
the lease is no longer this worker's."""

import asyncio
import json
from typing import Any

import structlog

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable

log = structlog.get_logger("bloom.worker")

MAX_BATCH = 500
MAX_BATCH_BYTES = 1024 * 1024
"""Well under the runtime's request body limit (BLOOM_MAX_BODY_BYTES, 5 MiB by default)."""
MAX_EVENT_BYTES = 60 * 1024
MAX_BUFFERED = 5000

FENCED = frozenset({403, 404, 409})
"""Answers that mean the lease is not (or no longer) this worker's."""


class LeaseLost(Exception):
    """The runtime refused the lease: this worker must stop working on the task."""


def _bounded(kind: str, data: Any) -> dict[str, Any]:
    """An event small enough for the runtime; a huge one keeps its kind and a preview."""
    text = json.dumps(data, default=str)
    if len(text) <= MAX_EVENT_BYTES:
        return {"type": kind, "data": data}
    inner = data.get("type") if isinstance(data, dict) else None
    return {"type": kind, "data": {"type": inner, "truncated": True, "preview": text[:4000]}}


class EventOutbox:
    """Events waiting to be posted, in order; kept across a runtime outage, within a bound."""

    def __init__(self, client: RuntimeClient, task_id: str, lease_id: str, worker_id: str):
        self.client = client
        self.ids = (task_id, lease_id, worker_id)
        self.pending: list[dict[str, Any]] = []
        self.dropped = 0
        self._posting = asyncio.Lock()
        """One post at a time: a batch leaves `pending` only once the runtime has answered it."""

    async def add(self, kind: str, data: Any) -> None:
        if len(self.pending) >= MAX_BUFFERED:
            self.pending.pop(0)
            self.dropped += 1
        self.pending.append(_bounded(kind, data))

    async def flush(self) -> None:
        """Post what is pending; raises LeaseLost when the runtime refuses the lease.

        A caller cancelled meanwhile (the keeper, when the CLI ends) leaves the flush to finish
        on its own: a batch the runtime may already have stored is never left pending, to be
        posted a second time by the next flush, which waits for it."""
        await asyncio.shield(self._flush())

    async def _flush(self) -> None:
        async with self._posting:
            await self._post_pending()

    async def _post_pending(self) -> None:
        while self.pending and await self._post_first():
            pass

    async def _post_first(self) -> bool:
        """Post the first batch of what is pending; False when it is kept for later (the
        runtime unreachable or restarting). Raises LeaseLost when the runtime refuses the
        lease."""
        batch = _batch(self.pending)
        try:
            await self.client.send_events(*self.ids, batch)
        except RuntimeUnreachable:
            return False  # kept; the next flush tries again
        except RuntimeApiError as exc:
            if exc.status in FENCED:
                raise LeaseLost(exc.message) from None
            if exc.status >= 500:
                return False  # the runtime restarting (a proxy's 502, 503): kept, tried again
            log.warning("events_rejected", task_id=self.ids[0], error=exc.message)
        del self.pending[: len(batch)]
        return True

    async def last(self, room: int) -> list[dict[str, Any]]:
        """What is pending, taken to go with the complete: its last events, at most MAX_BATCH
        in `room` bytes; any before them are posted first (raises LeaseLost as `flush`). Those
        a post could not take (the runtime unreachable meanwhile) are left behind, as a last
        flush before a complete would leave them."""
        async with self._posting:  # after a post in flight has taken its batch out
            keep = _fitting_tail(self.pending, room)
            taken = self.pending[len(self.pending) - keep :]
            del self.pending[len(self.pending) - keep :]
            await self._post_pending()
            if self.pending:
                log.warning("events_left_behind", task_id=self.ids[0], count=len(self.pending))
            self.pending = []
        return taken


def _fitting_tail(pending: list[dict[str, Any]], room: int) -> int:
    """How many of the last events fit in `room` bytes, at most MAX_BATCH of them."""
    size = 0
    for count, event in enumerate(reversed(pending[-MAX_BATCH:])):
        size += len(json.dumps(event, default=str))
        if size > room:
            return count
    return min(len(pending), MAX_BATCH)


def _batch(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first events, at most MAX_BATCH of them and about MAX_BATCH_BYTES (at least one)."""
    size = 0
    for count, event in enumerate(pending[:MAX_BATCH]):
        size += len(json.dumps(event, default=str))
        if size > MAX_BATCH_BYTES and count:
            return pending[:count]
    return pending[:MAX_BATCH]
