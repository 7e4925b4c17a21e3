"""Membridge's rate-limit policy: every path but `GET /health` is limited.

A request with a valid `X-MEMBRIDGE-ADMIN` key (compared as `AdminKeyMiddleware` does, in
constant time) is the admin: one budget (`BLOOM_MEMBRIDGE_RATE_LIMIT_ADMIN`) shared by every key
holder (the runtime, the agents). Anything else is known by its client address and charged to
`BLOOM_MEMBRIDGE_RATE_LIMIT_API`, so a flood of bad keys cannot starve the key holders. In dev
mode without a key everyone is an admin, counted by address.
"""

from starlette.types import Scope

from bloom.domain.identity import Identity, Kind, Role
from bloom.domain.secrets import key_matches
from bloom.membridge.auth import HEADER
from bloom.membridge.settings import MembridgeSettings
from bloom.web.rate_limit import Budget, Charge, Policy, rate_key

UNLIMITED = frozenset({"/health"})
ADMIN = Identity(Kind.ADMIN_KEY, "admin", Role.ADMIN)


def membridge_policy(settings: MembridgeSettings) -> Policy:
    admin = Budget("admin", settings.rate_limit_admin)
    api = Budget("api", settings.rate_limit_api)
    expected = settings.admin_key_value.encode()
    proxies = settings.trusted_proxies

    def charges(scope: Scope) -> tuple[Charge, ...]:
        if scope["path"] in UNLIMITED:
            return ()
        if not expected:  # dev mode: no key, everything open
            return (Charge(admin, rate_key(scope, proxies)),)
        presented = next((value for name, value in scope["headers"] if name == HEADER), None)
        if presented is not None and key_matches(presented, expected):
            return (Charge(admin, ADMIN.rate_key),)
        return (Charge(api, rate_key(scope, proxies)),)

    return charges
