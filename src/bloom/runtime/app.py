"""The runtime's FastAPI application factory."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.staticfiles import StaticFiles

from bloom import __version__
from bloom.domain.clock import Clock, system_clock
from bloom.runtime.access import authorize
from bloom.runtime.api import (
    approvals,
    budgets,
    events,
    install,
    lease_protocol,
    membridge,
    metrics,
    projects,
    records,
    system,
    tasks,
    tool_policies,
    usage,
    workers,
)
from bloom.runtime.auth import KEY_HEADER, IdentityMiddleware
from bloom.runtime.container import build_container
from bloom.runtime.dashboard import actions, login, pages
from bloom.runtime.http import error_body, install_error_handlers, invalid_query
from bloom.runtime.login import CSRF_HEADER, LoginCodec
from bloom.runtime.loops import LoopRunner
from bloom.runtime.openapi import document_runtime_errors
from bloom.runtime.rate_limits import runtime_policy
from bloom.runtime.secret_key import server_secret
from bloom.runtime.settings import RuntimeSettings
from bloom.web.api_docs import add_api_docs
from bloom.web.client_address import client_address
from bloom.web.collector import tune_for_serving
from bloom.web.guards import install_http_guards
from bloom.web.head import HeadAsGetMiddleware
from bloom.web.lean_routes import LeanRoutes
from bloom.web.origins import OriginPolicy
from bloom.web.rate_limit import RateLimiter, RateLimitMiddleware
from bloom.web.request_log import RequestLogMiddleware

RT = "/api/runtime"
ROUTINE_REQUESTS = {
    ("GET", f"{RT}/health"): frozenset({200}),
    ("GET", "/metrics"): frozenset({200}),
    ("POST", f"{RT}/workers"): frozenset({200}),  # a worker's presence (201: a new one, INFO)
    ("POST", f"{RT}/workers/{{worker_id}}/claim"): frozenset({204}),  # waited, got nothing
    # a lookup, polled by `bloom up` until its worker registers (404 until then)
    ("GET", f"{RT}/workers/{{worker_id}}"): frozenset({200, 404}),
    ("POST", f"{RT}/llm-tasks/{{task_id}}/heartbeat"): frozenset({200}),
    ("POST", f"{RT}/llm-tasks/{{task_id}}/events"): frozenset({200}),
}
"""Requests logged at DEBUG: polling and keep-alives, not events (`web/request_log.py`)."""
LEAN = (tasks.create_task, lease_protocol.claim, lease_protocol.heartbeat, lease_protocol.complete)
"""The seed's cycle: served first, without FastAPI's per-request machinery where it does nothing
for them (`web/lean_routes.py`)."""


def create_app(settings: RuntimeSettings | None = None, *, clock: Clock = system_clock) -> FastAPI:
    """Build the app. Storage and loops are created at startup (in the lifespan), so that every
    worker process of a multi-process server gets its own."""
    settings = settings or RuntimeSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        container = build_container(settings, clock, serving=True)
        app.state.container = container
        runner = LoopRunner(container.loops)
        runner.start()
        try:
            yield
        finally:
            await runner.stop()
            await container.close()

    app = FastAPI(
        title="BLOOM Runtime",
        version=__version__,
        summary="Queue LLM tasks, lease them to Claude CLI workers, keep every result.",
        docs_url=None,  # add_api_docs: Swagger UI from the package
        redoc_url=None,
        openapi_url="/api/openapi.json",
        lifespan=lifespan,
        dependencies=[Depends(authorize)],  # every route has an access rule (runtime/access.py)
    )
    for module in (  # the lease protocol first: routes are matched in order, one by one
        lease_protocol,
        tasks,
        workers,
        system,
        login,
        install,
        events,
        records,
        usage,
        budgets,
        tool_policies,
        approvals,
        membridge,
        projects,
        metrics,
        pages,
        actions,
    ):
        app.include_router(module.router)
    app.router.routes.insert(0, LeanRoutes(app.router.routes, LEAN))
    add_api_docs(app, "/api/docs")
    app.mount("/static", StaticFiles(packages=[("bloom.runtime.dashboard", "static")]), "static")
    app.state.logins = LoginCodec(server_secret(settings))
    app.state.trusted_proxies = settings.trusted_proxies
    app.state.metrics_public = settings.metrics_public

    install_error_handlers(app)
    login.install_page_refusals(app)
    document_runtime_errors(app)
    if settings.rate_limit_enabled:  # added first: runs after the identity is known
        limiter = RateLimiter.from_url(
            settings.rate_limit_storage, key_prefix=settings.rate_limit_key_prefix
        )
        app.add_middleware(RateLimitMiddleware, limiter=limiter, policy=runtime_policy(settings))
    app.add_middleware(
        IdentityMiddleware,
        admin_key=settings.api_key_value,
        logins=app.state.logins,
        address_of=lambda scope: client_address(scope, settings.trusted_proxies),
    )
    install_http_guards(
        app,
        settings,
        origins=OriginPolicy(
            open_mode=None if settings.api_key_value else "without RUNTIME_API_KEY",
            allowed_hosts=settings.allowed_hosts,
            own_headers=(KEY_HEADER, CSRF_HEADER.encode(), b"hx-request"),
        ),
        too_large=b'{"error":"Request body too large"}',
        not_found=b'{"error":"Not found"}',
        error_body=error_body,
        bad_query=invalid_query,
        docs_paths={"/api/docs"},
        redirect_exempt={"/api/runtime/health", "/api/membridge/health"},
    )
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(
        RequestLogMiddleware,
        server="runtime",
        routine=ROUTINE_REQUESTS,
        access_log=settings.access_log,
        trusted_proxies=settings.trusted_proxies,
    )
    return app


def create_app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory` in multi-process mode: settings come from the env; the
    process serves from then on (`tune_for_serving`)."""
    app = create_app()
    tune_for_serving()
    return app
