"""Pure-ASGI guards both servers put in front of their routes.

- `BodyLimitMiddleware`: a request body larger than the limit answers 413, whether its
  Content-Length says so up front (nothing is read) or a chunked body grows past it (reading
  stops at the chunk that crosses the limit).
- `SecurityHeadersMiddleware`: `X-Content-Type-Options: nosniff` on every answer; on every HTML
  answer (decided by its content type, so pages added later are covered too) a strict
  Content-Security-Policy, `X-Frame-Options: DENY` and `Referrer-Policy: no-referrer`. The API
  docs pages get the one relaxation they need: their own inline bootstrap script allowed by its
  hash, inline styles (Swagger UI's own files come from the server: `api_docs.py`).
- `ControlCharacterMiddleware`: a path with a control character names nothing (404); a query
  value with a NUL character is refused (400), as no database stores one.
- `UnexpectedErrorMiddleware`: an exception nothing handled is logged and answered 500 in the
  app's shape, inside the request-log middleware, so that it carries `X-Request-ID` too.
- `HttpsRedirectMiddleware`: behind a TLS-terminating proxy, a request it marks
  `X-Forwarded-Proto: http` is sent to `https://<host><path>` with 301 (off unless enabled).
- `OriginGuardMiddleware`: the server's `OriginPolicy` (`bloom.web.origins`): 421 for a Host
  that open mode does not serve, 403 for a cross-site state change sent without a preflight.
"""

import base64
import hashlib
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any
from urllib.parse import parse_qsl

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bloom.domain.errors import Unavailable
from bloom.web.origins import CROSS_SITE, OriginPolicy
from bloom.web.settings import ServerSettings

log = structlog.get_logger("bloom.http")
TOO_LARGE = "Request body too large"
NOSNIFF = (b"x-content-type-options", b"nosniff")
HTML_HEADERS = ((b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"))
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DOCS_CSP = (
    "default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
HOST = re.compile(rb"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


class BodyTooLarge(HTTPException):
    """Raised from `receive` when the body grows past the limit. An HTTPException, so that the
    framework answers it with the app's own error shape (and never takes it for a bad body)."""

    def __init__(self) -> None:
        super().__init__(413, TOO_LARGE)


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int, answer: bytes):
        """`answer` is the JSON body of the 413, in the app's error shape."""
        self.app = app
        self.max_bytes = max_bytes
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:  # else the answer is under way: the server ends the connection
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        await _answer(send, 413, self.answer)


def contains_nul(value: Any) -> bool:
    """Whether a parsed JSON value holds a NUL character in any string (keys included)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list | tuple):
        return any(contains_nul(item) for item in value)
    if isinstance(value, dict):
        return any(contains_nul(key) or contains_nul(item) for key, item in value.items())
    return False


BadQuery = Callable[[str], tuple[int, bytes]]
ErrorBody = Callable[[str], bytes]
"""An app's error answer (`{"error": …}` or `{"detail": …}`) around a message."""


class ControlCharacterMiddleware:
    def __init__(self, app: ASGIApp, *, not_found: bytes, bad_query: BadQuery):
        """`not_found` is the app's 404 body; `bad_query(name)` its refusal of a parameter."""
        self.app = app
        self.not_found = not_found
        self.bad_query = bad_query

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if CONTROL.search(scope["path"]):
            await _answer(send, 404, self.not_found)
            return
        query = scope.get("query_string", b"")
        if b"%00" in query or b"\x00" in query:
            pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
            name = next((k for k, v in pairs if "\x00" in k or "\x00" in v), None)
            if name is not None:
                await _answer(send, *self.bad_query(name.replace("\x00", "")))
                return
        await self.app(scope, receive, send)


async def _answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class UnexpectedErrorMiddleware:
    """What the routes' handlers did not answer: a refusal raised in a middleware (the database
    unreachable while the caller's key is looked up: 503) or a bug (500, logged)."""

    def __init__(self, app: ASGIApp, *, error_body: ErrorBody):
        self.app = app
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except BodyTooLarge:
            raise  # the body limit answers it
        except Unavailable as exc:
            if started:
                raise
            retry = exc.retry_after_sec
            headers = [(b"retry-after", str(retry).encode())] if retry is not None else []
            await _answer(send, 503, self.error_body(exc.message), headers)
        except Exception as exc:
            log.exception("unhandled_error", path=scope["path"], error_type=type(exc).__name__)
            if started:  # too late for another answer; the server closes the connection
                raise
            await _answer(send, 500, self.error_body("Internal server error"))


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp, *, docs_paths: Collection[str] = ()):
        self.app = app
        self.docs_paths = frozenset(docs_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"] in self.docs_paths
        held: Message | None = None  # a docs page's start, until its body is known
        body: list[bytes] = []

        async def guarded_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                html = _is_html(headers)
                headers = [h for h in headers if h[0] != NOSNIFF[0]] + [NOSNIFF]
                if html:
                    headers += HTML_HEADERS
                    if not docs:
                        headers.append((b"content-security-policy", PAGE_CSP.encode()))
                message = {**message, "headers": headers}
                if html and docs:
                    held = message
                    return
            elif message["type"] == "http.response.body" and held is not None:
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                content = b"".join(body)
                csp = DOCS_CSP.format(hashes=" ".join(_script_hashes(content)))
                policy = (b"content-security-policy", csp.encode())
                start = {**held, "headers": [*held["headers"], policy]}
                held = None
                await send(start)
                await send({"type": "http.response.body", "body": content})
                return
            await send(message)

        await self.app(scope, receive, guarded_send)


def _is_html(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    return content_type.split(b";")[0].strip().lower() == b"text/html"


def _script_hashes(page: bytes) -> list[str]:
    """CSP source expressions allowing exactly the page's own inline scripts."""
    return [
        f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in INLINE_SCRIPT.findall(page)
    ]


class HttpsRedirectMiddleware:
    """`X-Forwarded-Proto: http` → 301 to the same host and path over https (the seed's
    production redirect). Paths in `exempt` (health checks) are served as they come."""

    def __init__(self, app: ASGIApp, *, exempt: Collection[str] = ()):
        self.app = app
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        proto = (_header(scope, b"x-forwarded-proto") or b"").split(b",")[0].strip().lower()
        host = _header(scope, b"host") or b""
        if proto != b"http" or not HOST.fullmatch(host):
            await self.app(scope, receive, send)
            return
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        location = b"https://" + host + path + (b"?" + query if query else b"")
        await send(
            {
                "type": "http.response.start",
                "status": 301,
                "headers": [(b"location", location), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})


class OriginGuardMiddleware:
    def __init__(self, app: ASGIApp, *, policy: OriginPolicy, error_body: ErrorBody):
        self.app = app
        self.policy = policy
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        misdirected = self.policy.misdirected(headers)
        if misdirected is not None:
            await _answer(send, 421, self.error_body(misdirected))
        elif self.policy.cross_site_change(scope["method"], headers):
            await _answer(send, 403, self.error_body(CROSS_SITE))
        else:
            await self.app(scope, receive, send)


def install_http_guards(
    app: Starlette,
    settings: ServerSettings,
    *,
    origins: OriginPolicy,
    too_large: bytes,
    not_found: bytes,
    bad_query: BadQuery,
    docs_paths: Collection[str],
    redirect_exempt: Collection[str],
    error_body: ErrorBody,
) -> None:
    """Add the guards (call it before the request-log middleware, which stays outermost): the
    redirect first, then the headers, then the Host and origin checks (`origins`), then the
    body limit and the control characters, in front of everything else; what the routes'
    handlers did not answer is answered inside them. The bodies given, and `error_body` (the
    app's error shape), are the app's own error answers."""
    app.add_middleware(UnexpectedErrorMiddleware, error_body=error_body)
    app.add_middleware(ControlCharacterMiddleware, not_found=not_found, bad_query=bad_query)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, answer=too_large)
    app.add_middleware(OriginGuardMiddleware, policy=origins, error_body=error_body)
    app.add_middleware(SecurityHeadersMiddleware, docs_paths=docs_paths)
    if settings.https_redirect:
        app.add_middleware(HttpsRedirectMiddleware, exempt=redirect_exempt)
