"""The runtime's rate-limit policy: which budgets a request is charged to.

- `/api/runtime/*` and `/api/membridge/*` are limited (the seed's mounts), except
  `GET /api/runtime/health`, and so are the dashboard's pages and actions (`/`, `/tasks`, …,
  `/login`), charged to the same API budget; its static files and `/api/docs` are not.
- The key is the caller's identity (`Identity.rate_key`: a key, a user, the admin key), else
  `anonymous:<client address>` (`BLOOM_TRUSTED_PROXIES` decides whose X-Forwarded-For counts).
- Worker traffic is charged to the worker budget (`BLOOM_RATE_LIMIT_WORKER`) instead of the API
  budget: everything a worker-role identity sends, and the worker protocol (register, claim,
  heartbeat, complete, events) whoever sends it. The two are separate counters, so no amount of
  dashboard or CLI load from the same identity or address can starve a worker's heartbeats.
- A caller without valid credentials (none, or a wrong key or login; not the open development
  mode) is charged to the anonymous budget of its address (`BLOOM_RATE_LIMIT_ANONYMOUS`)
  instead: a flood of refused requests is cut off here, before any body is read.
- `POST /api/runtime/test-connection` is charged to its own budget too (the seed's strict
  limiter), on top of the caller's budget.
"""

import re

from starlette.types import Scope

from bloom.domain.identity import Role
from bloom.runtime.settings import RuntimeSettings
from bloom.web.rate_limit import Budget, Charge, Policy, identity_of, rate_key

LIMITED_PREFIXES = (
    "/api/runtime/",
    "/api/membridge/",
    "/tasks/",
    "/workers/",
    "/membridge/",
    "/projects/",
    "/audit/",
    "/settings/",
    "/login/",
    "/logout/",
)
UNLIMITED = frozenset({"/api/runtime/health"})
TEST_CONNECTION = "/api/runtime/test-connection"
WORKER_PROTOCOL = re.compile(
    r"/api/runtime/(?:workers(?:/[^/]+/(?:claim|complete))?|llm-tasks/[^/]+/(?:heartbeat|complete|events))"
)
"""POST only: registering, claiming, and reporting on leases."""


def runtime_policy(settings: RuntimeSettings) -> Policy:
    api = Budget("api", settings.rate_limit_api)
    worker = Budget("worker", settings.rate_limit_worker)
    anonymous = Budget("anonymous", settings.rate_limit_anonymous)
    test_connection = Budget("test-connection", settings.rate_limit_test_connection)
    proxies = settings.trusted_proxies

    def charges(scope: Scope) -> tuple[Charge, ...]:
        path = scope["path"].rstrip("/") + "/"
        if not (path == "/" or path.startswith(LIMITED_PREFIXES)) or path[:-1] in UNLIMITED:
            return ()
        path = path[:-1]
        key = rate_key(scope, proxies)
        identity = identity_of(scope)
        post = scope["method"] == "POST"
        if identity is not None and identity.role is None:
            base = Charge(anonymous, key)
        elif (identity is not None and identity.role == Role.WORKER) or (
            post and WORKER_PROTOCOL.fullmatch(path)
        ):
            base = Charge(worker, key)
        else:
            base = Charge(api, key)
        if post and path == TEST_CONNECTION:
            return (base, Charge(test_connection, key))
        return (base,)

    return charges
