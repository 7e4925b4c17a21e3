"""Error answers in the reference's shape, `{"detail": …}`, and never a stack trace.

Validation failures keep FastAPI's 422 `{"detail": [...]}`; unknown paths answer FastAPI's 404
`{"detail": "Not Found"}`; a refused use-case answers its status with its message; anything
unexpected is logged and answers 500 `{"detail": "Internal server error"}`.
"""

import json

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bloom.services.errors import Conflict, NotFound, ServiceError

log = structlog.get_logger("bloom.membridge")

SERVICE_STATUS: dict[type[ServiceError], int] = {NotFound: 404, Conflict: 409}
NUL_MESSAGE = "Must not contain NUL characters"


def detail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


def invalid_query(name: str) -> tuple[int, bytes]:
    """A query parameter no database could store (a NUL character), as FastAPI's 422."""
    problem = {"type": "value_error", "loc": ["query", name], "msg": NUL_MESSAGE, "input": None}
    return 422, json.dumps({"detail": [problem]}).encode()


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        return detail(SERVICE_STATUS.get(type(exc), 400), exc.message)


class UnexpectedErrorMiddleware:
    """Turns an unhandled exception into a logged 500 JSON answer. It sits inside the request-id
    middleware, so that answer carries `X-Request-ID` like every other."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unhandled_error", path=scope["path"], error_type=type(exc).__name__)
            if started:  # too late for another answer; the server closes the connection
                raise
            await detail(500, "Internal server error")(scope, receive, send)
