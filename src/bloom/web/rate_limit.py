"""Rate limits per identity, for both servers: a pure-ASGI middleware over `limits`' fixed window.

Each server has a policy (`bloom.runtime.rate_limits`, `bloom.membridge.rate_limits`) that says
which budgets a request is charged to, and under which key (the caller's identity, or its
address). Every charge counts one hit in a one-minute window that opens with the key's first
hit; a request over any of its budgets is answered `429` with `Retry-After`, and every limited
response carries the `RateLimit-Limit`, `-Remaining`, `-Reset` and `-Policy` headers of its
tightest budget (as the seed's express-rate-limit with `standardHeaders`).

Counters live in memory (per process) or in Redis (shared by every process that names it). When
Redis does not answer, requests pass unlimited: one warning per outage, the storage tried again
every `RETRY_SEC`, never a 500.
"""

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

import orjson
import structlog
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import FixedWindowRateLimiter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bloom.domain.identity import Identity, Kind
from bloom.web.client_address import Network, client_address

log = structlog.get_logger("bloom.web.rate_limit")
T = TypeVar("T")

MESSAGE = "Too many requests, please try again later"
WINDOW_SEC = 60
RETRY_SEC = 1.0
"""While the storage is down, how long requests pass without trying it again."""
REDIS_TIMEOUT_SEC = 0.5
REDIS_PORT = 6379
MAX_REMEMBERED = 10_000
"""Window ends remembered (one per key and budget); beyond that, the expired are forgotten."""
MEMORY_SCHEMES = ("memory", "async+memory")
REDIS_SCHEMES = ("redis", "rediss", "redis+unix")
STORAGE_SCHEMES = (*MEMORY_SCHEMES, *REDIS_SCHEMES, *(f"async+{s}" for s in REDIS_SCHEMES))


@dataclass(frozen=True, slots=True)
class Budget:
    """A number of requests per minute, counted per key."""

    name: str
    per_minute: int
    item: RateLimitItem = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "item", RateLimitItemPerMinute(self.per_minute))

    @property
    def policy(self) -> str:
        return f"{self.per_minute};w={WINDOW_SEC}"


@dataclass(frozen=True, slots=True)
class Charge:
    """One hit on `budget` for `key` (an identity's rate key, or `anonymous:<address>`)."""

    budget: Budget
    key: str


Policy = Callable[[Scope], Sequence[Charge]]
"""What a request is charged; nothing for a path that is not limited."""


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    budget: Budget
    remaining: int
    reset_sec: int
    """Seconds until the window ends (rounded up)."""

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"ratelimit-policy", self.budget.policy.encode()),
            (b"ratelimit-limit", str(self.budget.per_minute).encode()),
            (b"ratelimit-remaining", str(self.remaining).encode()),
            (b"ratelimit-reset", str(self.reset_sec).encode()),
        ]
        if not self.allowed:
            headers.append((b"retry-after", str(max(self.reset_sec, 1)).encode()))
        return headers


def make_storage(url: str, *, key_prefix: str) -> Storage:
    """`memory://`, or a Redis URL (`redis://[:password@]host:port/db`, `rediss://…`,
    `redis+unix:///path`; the `async+` forms of `limits` also do)."""
    scheme = url.partition("://")[0].lower()
    if scheme in MEMORY_SCHEMES:
        return MemoryStorage()
    if scheme in STORAGE_SCHEMES:
        parts = urlsplit(url if scheme.startswith("async+") else f"async+{url}")
        if parts.hostname and parts.port is None:  # `limits` wants one
            parts = parts._replace(netloc=f"{parts.netloc}:{REDIS_PORT}")
        return RedisStorage(
            parts.geturl(),
            wrap_exceptions=True,
            key_prefix=key_prefix,
            connect_timeout=REDIS_TIMEOUT_SEC,
            stream_timeout=REDIS_TIMEOUT_SEC,
        )
    raise ValueError(f"unknown rate-limit storage {scheme!r}: use memory:// or redis://…")


def shown_url(url: str) -> str:
    """The storage URL without credentials, for logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path if not host else ''}"


class FixedWindow(FixedWindowRateLimiter):
    """`limits`' fixed window (same keys, same storage operations), telling the count a hit
    reached and when its window ends, so that the headers cost no extra round trips: a hit is
    one `INCRBY` on Redis (and an `EXPIRE` when it opens a window); the end of a window is asked
    once per window and remembered.

    `limits` sends that `INCRBY` and `EXPIRE` apart: a counter whose `EXPIRE` was lost (the
    connection broke in between) would never end, so a refusal whose window seems to end now
    deletes the counter (`RateLimiter._check`), and the next request opens a new window."""

    def __init__(self, storage: Storage):
        super().__init__(storage)
        self.ends: dict[str, float] = {}

    async def count(self, item: RateLimitItem, *identifiers: str) -> tuple[int, float]:
        """Count one hit: the hits in the window so far, and the window's end (epoch seconds)."""
        key = item.key_for(*identifiers)
        hits = await self.storage.incr(key, item.get_expiry())
        end = self.ends.get(key, 0.0)
        if end <= time.time():
            end = await self.storage.get_expiry(key)
            self._remember(key, end)
        return hits, end

    def _remember(self, key: str, end: float) -> None:
        if len(self.ends) >= MAX_REMEMBERED:
            now = time.time()
            self.ends = {k: e for k, e in self.ends.items() if e > now}
            if len(self.ends) >= MAX_REMEMBERED:
                self.ends.clear()
        self.ends[key] = end


class FailOpen:
    """Calls on a counter storage that, while it fails, answer a default instead of raising:
    one warning per outage, the storage tried again every `RETRY_SEC`, never a 500."""

    def __init__(self, name: str, meanwhile: str):
        self.name = name
        self.meanwhile = meanwhile
        """What happens while the storage is down, for the warning."""
        self.failing = False
        self.retry_at = 0.0

    async def call(self, work: Callable[[], Awaitable[T]], default: T) -> T:
        if self.failing and time.monotonic() < self.retry_at:
            return default
        try:
            result = await work()
        except Exception as exc:  # any storage failure
            self.retry_at = time.monotonic() + RETRY_SEC
            if not self.failing:
                self.failing = True
                log.warning(
                    "rate_limit_storage_unavailable",
                    storage=self.name,
                    error=f"{type(exc).__name__}: {exc}",
                    message=f"{self.meanwhile} until the storage answers again",
                )
            return default
        if self.failing:
            self.failing = False
            log.info("rate_limit_storage_recovered", storage=self.name)
        return result


class RateLimiter:
    """Hits in fixed one-minute windows, in `storage`; None (let it pass) while that fails."""

    def __init__(self, storage: Storage, *, name: str = "memory://"):
        self.strategy = FixedWindow(storage)
        self.guard = FailOpen(name, "requests pass without rate limits")

    @classmethod
    def from_url(cls, url: str, *, key_prefix: str) -> "RateLimiter":
        return cls(make_storage(url, key_prefix=key_prefix), name=shown_url(url))

    async def check(self, charges: Sequence[Charge]) -> Verdict | None:
        """Count the request against each budget in turn; the first refusal, else the verdict
        with the fewest requests left. None while the storage does not answer."""
        return await self.guard.call(lambda: self._check(charges), None)

    async def _check(self, charges: Sequence[Charge]) -> Verdict | None:
        reported: Verdict | None = None
        for charge in charges:
            budget = charge.budget
            hits, end = await self.strategy.count(budget.item, budget.name, charge.key)
            verdict = Verdict(
                allowed=hits <= budget.per_minute,
                budget=budget,
                remaining=max(budget.per_minute - hits, 0),
                reset_sec=max(math.ceil(end - time.time()), 0),
            )
            if not verdict.allowed:
                if verdict.reset_sec == 0:  # ending now, or a counter that lost its expiry
                    await self.strategy.clear(budget.item, budget.name, charge.key)
                return verdict
            if reported is None or verdict.remaining < reported.remaining:
                reported = verdict
        return reported


class RateLimitMiddleware:
    """Charges each HTTP request as `policy` says: 429 over a budget, the RateLimit headers on
    every limited response. Runs after the identity is known (`scope["state"]["identity"]`)
    and before routing."""

    def __init__(
        self, app: ASGIApp, *, limiter: RateLimiter, policy: Policy, error_key: str = "error"
    ):
        self.app = app
        self.limiter = limiter
        self.policy = policy
        self.body = orjson.dumps({error_key: MESSAGE})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        charges = self.policy(scope)
        verdict = await self.limiter.check(charges) if charges else None
        if verdict is None:
            await self.app(scope, receive, send)
            return
        headers = verdict.headers()
        if not verdict.allowed:
            await self._refuse(send, headers)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _refuse(self, send: Send, headers: list[tuple[bytes, bytes]]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self.body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": self.body})


def identity_of(scope: Scope) -> Identity | None:
    """Who the identity middleware found the caller to be, if it ran."""
    state = scope.get("state")
    identity = state.get("identity") if isinstance(state, dict) else None
    return identity if isinstance(identity, Identity) else None


def rate_key(scope: Scope, trusted_proxies: Sequence[Network]) -> str:
    """The identity's rate key; without one, `anonymous:<client address>`."""
    identity = identity_of(scope)
    if identity is not None:
        return identity.rate_key
    return f"{Kind.ANONYMOUS}:{client_address(scope, trusted_proxies)}"
