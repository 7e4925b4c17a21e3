"""The runtime's client for the Membridge control plane: retries, backoff, timeouts, and the
connection state the runtime's health reports.

The seed's semantics (REFERENCE_BEHAVIOUR §1.9): up to `retries` more attempts after the first,
each with a per-attempt timeout; before attempt k ≥ 1 a pause of 500 ms * 2^(k-1) plus up to 30 %
jitter. A reply below 500 ends the call as a success (4xx is not retried); a 5xx is retried and
the last one returned, leaving the connection state alone; a network error or timeout counts a
failure per attempt, and after the last attempt raises `MembridgeUnavailable`. The admin key goes
in the `X-MEMBRIDGE-ADMIN` header and nowhere else: not in errors, not in logs.

The calls the worker makes are typed: `register_agent` and `node_heartbeat` parse Membridge's
answer (`MembridgeContractError` when it has another shape), and give None when Membridge refused
the call (the reference control plane refuses an agent without a url).
"""

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import httpx

from bloom.clients.fields import Fields, Parser, WireError, parse_body
from bloom.domain.clock import Clock

ADMIN_HEADER = "X-MEMBRIDGE-ADMIN"
Credentials = Callable[[], Awaitable[tuple[str, str]]]
"""Returns (base URL, admin key), read fresh for each call: the operator may change them."""
T = TypeVar("T")


class MembridgeUnavailable(Exception):
    """Membridge could not be reached (after the retries)."""


class MembridgeContractError(MembridgeUnavailable):
    """Membridge answered, but not in the shape this client reads; the message names the field."""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """An agent as Membridge keeps it (its times in float seconds)."""

    name: str
    url: str
    status: str
    capabilities: Mapping[str, Any]
    last_seen: float | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "") -> Self:
        fields = Fields(data, where)
        last_seen = fields.number("last_seen", 0.0)
        return cls(
            name=fields.text("name"),
            url=fields.text("url"),
            status=fields.text("status"),
            capabilities=fields.mapping("capabilities"),
            last_seen=last_seen or None,
        )


@dataclass(frozen=True, slots=True)
class NodeRole:
    """A node heartbeat's answer: the node's role for the project now."""

    role: str
    canonical_id: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "") -> Self:
        fields = Fields(data, where)
        return cls(role=fields.text("role"), canonical_id=fields.text("canonical_id"))


@dataclass(slots=True)
class ConnectionState:
    """What the runtime's health reports about Membridge, under the seed's names."""

    consecutiveFailures: int = 0
    lastSuccess: int | None = None
    lastError: str | None = None

    @property
    def connected(self) -> bool:
        return self.consecutiveFailures == 0 and self.lastSuccess is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "consecutiveFailures": self.consecutiveFailures,
            "lastSuccess": self.lastSuccess,
            "lastError": self.lastError,
            "connected": self.connected,
        }


class MembridgeClient:
    def __init__(
        self,
        credentials: Credentials,
        clock: Clock,
        *,
        retries: int = 3,
        timeout_sec: float = 10.0,
        backoff_ms: int = 500,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.credentials = credentials
        self.clock = clock
        self.retries = retries
        self.timeout_sec = timeout_sec
        self.backoff_ms = backoff_ms
        self.state = ConnectionState()
        self._transport = transport
        self._sleep = sleep
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(transport=self._transport)
        return self._http

    def backoff_sec(self, attempt: int) -> float:
        """The pause before retry number `attempt`: base * 2^(attempt-1), plus up to 30 %."""
        base = float(self.backoff_ms * 2 ** (attempt - 1))
        return (base + random.uniform(0, 0.3 * base)) / 1000

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        retries: int | None = None,
        timeout_sec: float | None = None,
    ) -> httpx.Response:
        """One call to Membridge, retried as the module docstring says."""
        base_url, admin_key = await self.credentials()
        url = base_url.rstrip("/") + path
        timeout = self.timeout_sec if timeout_sec is None else timeout_sec
        attempts = 1 + (self.retries if retries is None else retries)
        for attempt in range(attempts):
            if attempt:
                await self._sleep(self.backoff_sec(attempt))
            try:
                response = await self._client().request(
                    method,
                    url,
                    json=json,
                    params=params,
                    headers={ADMIN_HEADER: admin_key},
                    timeout=timeout,
                )
            except httpx.TimeoutException:
                self._failed(f"Timeout after {int(timeout * 1000)}ms")
                continue
            except (httpx.HTTPError, ValueError) as exc:  # ValueError: a malformed base URL
                self._failed(_describe(exc))
                continue
            if response.status_code >= 500:
                self.state.lastError = f"HTTP {response.status_code}: {response.reason_phrase}"
                if attempt + 1 < attempts:
                    continue
                return response
            self.state.consecutiveFailures = 0
            self.state.lastSuccess = self.clock()
            self.state.lastError = None
            return response
        raise MembridgeUnavailable(self.state.lastError or "Membridge unreachable")

    async def register_agent(
        self, registration: Mapping[str, Any], *, timeout_sec: float | None = None
    ) -> AgentInfo | None:
        """Register (or update) an agent; None when Membridge refused it."""
        return await self._parsed(
            AgentInfo.from_json, "/agents", registration, timeout_sec=timeout_sec
        )

    async def node_heartbeat(self, beat: Mapping[str, Any]) -> NodeRole | None:
        """Report a node's project; its role now, or None when Membridge refused the beat."""
        return await self._parsed(NodeRole.from_json, "/agent/heartbeat", beat)

    async def _parsed(
        self, parse: Parser[T], path: str, body: Mapping[str, Any], **kwargs: Any
    ) -> T | None:
        response = await self.request("POST", path, json=body, **kwargs)
        if not response.is_success:
            return None
        try:
            return parse_body(response.content, parse)
        except WireError as exc:
            raise MembridgeContractError(f"unexpected reply to POST {path}: {exc}") from None

    def _failed(self, error: str) -> None:
        self.state.consecutiveFailures += 1
        self.state.lastError = error

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _describe(exc: Exception) -> str:
    """An error fit for health and logs: the kind and the message, never the request's headers."""
    message = str(exc) or "connection failed"
    return f"{type(exc).__name__}: {message}"
