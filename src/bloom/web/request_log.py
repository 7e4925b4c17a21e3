"""Request ids, one access-log line per request (method, path, status, time, the client's
address; never bodies), and the request's HTTP metrics (by route template).

The client is the peer, or behind a trusted reverse proxy the address it reports
(`client_address`): behind nginx, the browser's or the worker's, never nginx's.

Routine traffic (a health probe, an empty long-poll claim, a heartbeat, a scrape: what each
server lists in its `Routine`) is logged at DEBUG, so INFO shows what happened, not who polled.
"""

import logging
import re
import secrets
import time
from collections.abc import Mapping, Sequence

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bloom.web.client_address import Network, client_address
from bloom.web.metrics import UNMATCHED, observe_request

log = structlog.get_logger("bloom.access")
Routine = Mapping[tuple[str, str], frozenset[int]]
"""(method, route template) → the statuses for which such a request is routine."""
REQUEST_ID = b"x-request-id"
SAFE_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")


class RequestLogMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        server: str,
        routine: Routine,
        access_log: bool = True,
        trusted_proxies: Sequence[Network] = (),
    ):
        self.app = app
        self.server = server
        self.routine = routine
        self.access_log = access_log
        self.trusted_proxies = trusted_proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = next((v for k, v in scope["headers"] if k == REQUEST_ID), b"")
        request_id = given if SAFE_ID.fullmatch(given) else secrets.token_hex(6).encode()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (REQUEST_ID, request_id)]
            await send(message)

        # Each request runs in a task of its own, so the binding ends with it.
        structlog.contextvars.bind_contextvars(request_id=request_id.decode())
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path_format", UNMATCHED)
            observe_request(self.server, scope["method"], route, status, seconds)
            if self.access_log:
                routine = status in self.routine.get((scope["method"], route), ())
                log.log(
                    logging.DEBUG if routine else logging.INFO,
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round(seconds * 1000, 2),
                    client=client_address(scope, self.trusted_proxies),
                )
