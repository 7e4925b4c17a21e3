"""A minimal keep-alive HTTP/1.1 client for the benchmark: one connection, one request at a time.

httpx spends about 1.5 ms of client CPU per request, which would make the benchmark measure
itself. This client writes each request with one `transport.write` of prebuilt header bytes and
parses responses with httptools (llhttp, the parser uvicorn uses) fed straight from an asyncio
protocol's `data_received`, so no stream buffers or header objects are built. It handles
Content-Length and chunked bodies and bodiless responses (204); it does no TLS, redirects,
cookies, or pipelining. Bodies are JSON, encoded and decoded with orjson.
"""

import asyncio
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson


class HttpClientError(Exception):
    """The connection failed, closed early, timed out, or the reply was not valid HTTP."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a runtime listens, plus the headers every request carries."""

    host: str
    port: int
    path_prefix: str = ""
    api_key: str = ""

    @classmethod
    def from_url(cls, url: str, api_key: str = "") -> "Endpoint":
        """Parse `http://host[:port][/prefix]` (plain HTTP only)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected http://host[:port], got {url!r} (no TLS in the bench)")
        return cls(parts.hostname, parts.port or 80, parts.path.rstrip("/"), api_key)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path_prefix}"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


class _Protocol(asyncio.Protocol):
    """Feeds received bytes to httptools and resolves the pending request's future."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.chunks: list[bytes] = []
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpClientError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or HttpClientError("connection closed by the server")
        self._fail(self.lost)

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        body = b"".join(self.chunks)
        self.chunks = []
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self.parser.get_status_code(), body))

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


class HttpConnection:
    """One keep-alive connection; `request` sends JSON and waits for the whole response."""

    def __init__(self, endpoint: Endpoint, timeout: float = 60.0):
        self.endpoint = endpoint
        self.timeout = timeout
        self.requests = 0
        host = f"Host: {endpoint.host}:{endpoint.port}\r\n"
        key = f"X-Runtime-API-Key: {endpoint.api_key}\r\n" if endpoint.api_key else ""
        self._headers = f"{host}{key}Content-Type: application/json\r\n".encode("latin-1")
        self._prefix = endpoint.path_prefix.encode()
        self._protocol: _Protocol | None = None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(
                _Protocol, self.endpoint.host, self.endpoint.port
            )
        except OSError as exc:
            raise HttpClientError(f"cannot connect to {self.endpoint.url}: {exc}") from exc
        self._protocol = protocol

    async def request(self, method: str, path: str, body: Any = None) -> Response:
        """Send one request (`body` as JSON unless None) and return the response."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None or protocol.transport is None:
            await self.connect()
            protocol = self._protocol
            assert protocol is not None
            assert protocol.transport is not None
        data = b"" if body is None else orjson.dumps(body)
        head = b"%s %s%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            method.encode(),
            self._prefix,
            path.encode(),
            self._headers,
            len(data),
        )
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Response] = loop.create_future()
        protocol.waiter = waiter
        protocol.transport.write(head + data)
        self.requests += 1
        timer = loop.call_later(self.timeout, _expire, waiter, self.timeout)
        try:
            return await waiter
        except BaseException:
            self.close()  # a late or partial response must not answer the next request
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


def _expire(waiter: "asyncio.Future[Response]", timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(HttpClientError(f"no response within {timeout:g}s"))
