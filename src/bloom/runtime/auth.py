"""The seed's API-key check: `X-Runtime-API-Key` on `/api/runtime/*` and `/api/membridge/*`.

With no key configured everything is open (the seed's development mode). The comparison is
constant-time over bytes, so no header value (long, short, non-ASCII) can raise.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from bloom.domain.secrets import key_matches
from bloom.runtime.http import error

PROTECTED_PREFIXES = ("/api/runtime", "/api/membridge")
PUBLIC_PATHS = frozenset(
    {"/api/runtime/health", "/api/runtime/test-connection", "/api/membridge/health"}
)
HEADER = b"x-runtime-api-key"


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.expected or not self._protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        presented = next((value for name, value in scope["headers"] if name == HEADER), b"")
        if key_matches(presented, self.expected):
            await self.app(scope, receive, send)
            return
        await error(401, "Unauthorized")(scope, receive, send)

    @staticmethod
    def _protected(path: str) -> bool:
        path = path.rstrip("/") or "/"
        if path in PUBLIC_PATHS:
            return False
        return any(path == p or path.startswith(p + "/") for p in PROTECTED_PREFIXES)
