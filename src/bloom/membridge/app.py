"""The control plane's FastAPI application factory."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI

from bloom.domain.clock import Clock, system_clock
from bloom.membridge import API_VERSION
from bloom.membridge.api import agents, fleet, jobs, metrics, projects, sync, system
from bloom.membridge.auth import HEADER, METRICS_PATH, PUBLIC_PATHS, AdminKeyMiddleware
from bloom.membridge.container import build_container
from bloom.membridge.http import detail_body, install_error_handlers, invalid_query
from bloom.membridge.openapi import document_membridge_errors
from bloom.membridge.rate_limits import membridge_policy
from bloom.membridge.settings import MembridgeSettings
from bloom.web.api_docs import add_api_docs
from bloom.web.guards import install_http_guards
from bloom.web.head import HeadAsGetMiddleware
from bloom.web.origins import OriginPolicy
from bloom.web.rate_limit import RateLimiter, RateLimitMiddleware
from bloom.web.request_log import RequestLogMiddleware

log = structlog.get_logger("bloom.membridge")


ROUTINE_REQUESTS = {
    ("GET", "/health"): frozenset({200}),
    ("GET", "/metrics"): frozenset({200}),
    ("GET", "/agents"): frozenset({200}),  # the runtime's worker sync, every 10 s
    ("GET", "/nodes"): frozenset({200}),  # the same sync, in the same round
    ("POST", "/agents"): frozenset({200}),  # an agent's presence (201: a new one, INFO)
    ("POST", "/agent/heartbeat"): frozenset({200}),
}
"""Requests logged at DEBUG: polling and keep-alives, not events (`web/request_log.py`)."""


def create_app(
    settings: MembridgeSettings | None = None, *, clock: Clock = system_clock
) -> FastAPI:
    """Build the app. Raises `SettingsError` when there is no admin key and no dev mode: such a
    server would either be open by accident or refuse every request, so it is never built.
    Storage is opened at startup (in the lifespan)."""
    settings = settings or MembridgeSettings()
    settings.check_auth()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.auth_disabled:
            log.warning(
                "membridge_auth_disabled",
                message="MEMBRIDGE_DEV is set and no admin key is configured: EVERY endpoint "
                "is open to anyone who can reach this server. Development only.",
                host=settings.host,
            )
        container = build_container(settings, clock)
        app.state.container = container
        try:
            yield
        finally:
            await container.close()

    app = FastAPI(
        title="Membridge Control Plane",
        version=API_VERSION,
        summary="Agent registry, projects, node heartbeats and per-project leadership.",
        docs_url=None,  # add_api_docs: Swagger UI from the package
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    for module in (system, agents, projects, fleet, sync, jobs, metrics):
        app.include_router(module.router)
    add_api_docs(app, "/docs")
    install_error_handlers(app)
    document_membridge_errors(app, settings)
    if not settings.auth_disabled:
        app.add_middleware(
            AdminKeyMiddleware,
            admin_key=settings.admin_key_value,
            public_paths=PUBLIC_PATHS | ({METRICS_PATH} if settings.metrics_public else set()),
        )
    if settings.rate_limit_enabled:  # before the key check: refused callers are counted too
        limiter = RateLimiter.from_url(
            settings.rate_limit_storage, key_prefix=settings.rate_limit_key_prefix
        )
        app.add_middleware(
            RateLimitMiddleware,
            limiter=limiter,
            policy=membridge_policy(settings),
            error_key="detail",
        )
    install_http_guards(
        app,
        settings,
        origins=OriginPolicy(
            open_mode="in dev mode without an admin key" if settings.auth_disabled else None,
            allowed_hosts=settings.allowed_hosts,
            own_headers=(HEADER,),
        ),
        too_large=b'{"detail":"Request body too large"}',
        not_found=b'{"detail":"Not Found"}',
        error_body=detail_body,
        bad_query=invalid_query,
        docs_paths={"/docs"},
        redirect_exempt={"/health"},
    )
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(
        RequestLogMiddleware,
        server="membridge",
        routine=ROUTINE_REQUESTS,
        access_log=settings.access_log,
        trusted_proxies=settings.trusted_proxies,
    )
    return app
