"""Failure counts and lockouts per key, in the rate limiter's storage (`make_storage`): in memory
per process, or in Redis, shared by every process that names it.

A key's failures are one counter that expires a window after its first failure; a lockout is a
second key that expires when the lockout ends. While the storage does not answer nothing is
counted and nothing is locked out (`FailOpen`).
"""

import math
import time
from collections.abc import Sequence

from limits.aio.storage import Storage

from bloom.web.rate_limit import FailOpen, make_storage, shown_url

FAILURES = "failures"
LOCKOUT = "lockout"


class Lockouts:
    def __init__(self, storage: Storage, *, name: str = "memory://"):
        self.storage = storage
        self.guard = FailOpen(name, "logins pass without lockouts")

    @classmethod
    def from_url(cls, url: str, *, key_prefix: str) -> "Lockouts":
        return cls(make_storage(url, key_prefix=key_prefix), name=shown_url(url))

    async def locked_for(self, keys: Sequence[str]) -> int:
        """Seconds until the last of the keys' lockouts ends (rounded up); 0 when none is on."""

        async def remaining() -> int:
            ends = [await self.storage.get_expiry(f"{LOCKOUT}/{key}") for key in keys]
            return max((math.ceil(end - time.time()) for end in ends), default=0)

        return max(await self.guard.call(remaining, 0), 0)

    async def fail(self, key: str, window_sec: int) -> int:
        """Count one failure: the failures in the key's window so far (0 while the storage
        does not answer)."""
        return await self.guard.call(lambda: self.storage.incr(f"{FAILURES}/{key}", window_sec), 0)

    async def lock(self, key: str, seconds: int) -> None:
        """Lock the key out for `seconds` (a longer lockout already on stays)."""

        async def lock() -> None:
            name = f"{LOCKOUT}/{key}"
            if await self.storage.get_expiry(name) - time.time() < seconds:
                await self.storage.clear(name)
                await self.storage.incr(name, seconds)

        await self.guard.call(lock, None)

    async def forgive(self, key: str) -> None:
        """Forget the key's failures."""
        await self.guard.call(lambda: self.storage.clear(f"{FAILURES}/{key}"), None)
