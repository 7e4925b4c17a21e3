"""Who is calling: every request is resolved to an `Identity` before anything else looks at it.

- `X-Runtime-API-Key` equal to the configured `RUNTIME_API_KEY` (constant-time, over bytes, so
  no header value can raise): the admin, as in the seed.
- `X-Runtime-API-Key` holding a key made with `bloom key create`: that key's role (a worker key
  also names its worker). Keys are looked up by their SHA-256; a found key is remembered for
  `KEY_CACHE_SEC`, so a revocation takes effect within that time.
- The `bloom_session` cookie of a logged-in user: the user's role; for a state-changing request
  the CSRF token must come with it (checked here, enforced by the route rules).
- Nothing, or credentials that are not valid: anonymous, known by the client's address.

With no `RUNTIME_API_KEY` configured every caller is an admin (the seed's development mode).
The identity goes to `scope["state"]["identity"]`; refusing is left to the route rules
(`bloom.runtime.access`), so that rate limits can count refused callers too.
"""

import time
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie

from starlette.types import ASGIApp, Receive, Scope, Send

from bloom.domain.credentials import ApiKey, hash_key
from bloom.domain.identity import Identity, Kind, Role, anonymous, open_access
from bloom.domain.secrets import key_matches
from bloom.runtime.access import SAFE_METHODS
from bloom.runtime.container import Container
from bloom.runtime.login import (
    COOKIE,
    CSRF_HEADER,
    LoginCodec,
    csrf_matches,
    password_stamp,
)

KEY_HEADER = b"x-runtime-api-key"
KEY_CACHE_SEC = 10.0
KEY_CACHE_MAX = 10_000

AddressOf = Callable[[Scope], str]


def peer_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    try:
        jar = SimpleCookie(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None


class IdentityMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        admin_key: str,
        logins: LoginCodec,
        address_of: AddressOf = peer_address,
    ):
        self.app = app
        self.admin_key = admin_key.encode()
        self.logins = logins
        self.address_of = address_of
        self._keys: dict[str, tuple[float, ApiKey]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state = scope.setdefault("state", {})
            address = self.address_of(scope)
            if not self.admin_key:
                state["identity"] = open_access(address)
            else:
                state["identity"] = await self._identify(scope, state, address)
        await self.app(scope, receive, send)

    async def _identify(self, scope: Scope, state: dict[str, object], address: str) -> Identity:
        presented = _header(scope, KEY_HEADER)
        if presented is not None:
            if key_matches(presented, self.admin_key):
                return Identity(Kind.ADMIN_KEY, "admin", Role.ADMIN)
            key = await self._key(scope, hash_key(presented))
            if key is not None:
                return Identity(Kind.KEY, key.id, Role(key.role), key.worker_id, key.name)
            return anonymous(address)
        cookie = _cookie(scope, COOKIE)
        if cookie is not None:
            login = self.logins.read(cookie, int(time.time()))
            user = await _container(scope).credentials.user(login.user_id) if login else None
            if (
                user is not None
                and login is not None
                and login.stamp == password_stamp(user.password)
            ):
                token = _header(scope, CSRF_HEADER.encode())
                state["csrf_ok"] = scope["method"] in SAFE_METHODS or csrf_matches(
                    login.csrf, token.decode("latin-1") if token is not None else None
                )
                state["login"] = login
                return Identity(Kind.USER, user.id, Role(user.role), label=user.username)
        return anonymous(address)

    async def _key(self, scope: Scope, digest: str) -> ApiKey | None:
        now = time.monotonic()
        cached = self._keys.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        key = await _container(scope).credentials.key_by_hash(digest)
        if key is None:
            self._keys.pop(digest, None)
            return None
        if len(self._keys) >= KEY_CACHE_MAX:
            self._keys.clear()
        self._keys[digest] = (now + KEY_CACHE_SEC, key)
        return key


def _container(scope: Scope) -> Container:
    built: Container = scope["app"].state.container
    return built
