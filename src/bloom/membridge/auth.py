"""The admin key check: header `X-MEMBRIDGE-ADMIN` on every path but the public ones.

Constant-time over bytes (`key_matches`), so no header value (long, short, non-ASCII) can raise.
Without a key the app is only built in dev mode (`MembridgeSettings.check_auth`), and then this
middleware is not installed at all.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from bloom.domain.secrets import key_matches
from bloom.membridge.http import detail

HEADER = b"x-membridge-admin"
PUBLIC_PATHS = frozenset(
    {"/health", "/docs", "/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/openapi.json"}
)
METRICS_PATH = "/metrics"
"""Public too with BLOOM_METRICS_PUBLIC; else it needs the admin key, as everything else."""
UNAUTHORIZED = "Unauthorized — invalid or missing X-MEMBRIDGE-ADMIN header"


class AdminKeyMiddleware:
    def __init__(self, app: ASGIApp, admin_key: str, public_paths: frozenset[str] = PUBLIC_PATHS):
        if not admin_key:
            raise ValueError("an admin key is required")
        self.app = app
        self.expected = admin_key.encode()
        self.public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public_paths:
            await self.app(scope, receive, send)
            return
        presented = next((value for name, value in scope["headers"] if name == HEADER), b"")
        if key_matches(presented, self.expected):
            await self.app(scope, receive, send)
            return
        await detail(401, UNAUTHORIZED)(scope, receive, send)
