"""HTTP plumbing shared by every route: the JSON response, and errors in the seed's shapes.

Validation failures answer 400 `{"error": {"formErrors": [...], "fieldErrors": {...}}}` (zod's
`flatten()`, nested errors grouped under their top-level field); refusals answer
`{"error": "<message>"}`; nothing ever answers with a stack trace.
"""

from typing import Any

import orjson
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from bloom.domain.errors import (
    BadGateway,
    Conflict,
    Forbidden,
    Invalid,
    InvalidField,
    NotFound,
    ServiceError,
    Throttled,
    Unavailable,
    by_kind,
)
from bloom.runtime.access import unknown_route_refused

log = structlog.get_logger(__name__)

SERVICE_STATUS: dict[type[ServiceError], int] = {
    Invalid: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Throttled: 429,
    BadGateway: 502,
    Unavailable: 503,
}
HTTP_MESSAGES = {404: "Not found", 405: "Method not allowed"}
NUL_MESSAGE = "Must not contain NUL characters"
MALFORMED_BODY = "Malformed JSON body"


class JSON(Response):
    """JSON rendered by orjson: dataclasses, enums and lists of them, fast."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def service_status(exc: ServiceError) -> int:
    """The HTTP status a refusal answers with."""
    return by_kind(exc, SERVICE_STATUS, 400)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSON:
    return JSON({"error": message}, status_code=status, headers=headers)


def error_body(message: str) -> bytes:
    """An error answer's body, for the middleware that answer outside the routes."""
    return orjson.dumps({"error": message})


def invalid(message: str, field: str | None = None) -> JSON:
    """A 400 in the validation shape, for checks a body model cannot express."""
    flat = {
        "formErrors": [] if field else [message],
        "fieldErrors": {field: [message]} if field else {},
    }
    return JSON({"error": flat}, status_code=400)


def invalid_query(name: str) -> tuple[int, bytes]:
    """A query parameter no database could store (a NUL character), in the 400 shape."""
    flat = {"formErrors": [], "fieldErrors": {name: [NUL_MESSAGE]}}
    return 400, orjson.dumps({"error": flat})


def flatten_validation_errors(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Pydantic errors in zod's `flatten()` shape."""
    form_errors: list[str] = []
    field_errors: dict[str, list[str]] = {}
    for err in errors:
        loc = [part for part in err.get("loc", ()) if part not in ("body", "query", "path")]
        message = _message(err)
        if err.get("type") == "extra_forbidden":  # as zod's unrecognized_keys: at its object
            message = f"Unrecognized key: '{'.'.join(str(part) for part in loc[1:] or loc)}'"
            loc = loc[:1] if len(loc) > 1 else []
        if loc and isinstance(loc[0], str):
            field_errors.setdefault(loc[0], []).append(message)
        else:
            form_errors.append(message)
    return {"formErrors": form_errors, "fieldErrors": field_errors}


def _message(err: dict[str, Any]) -> str:
    if err.get("type") == "json_invalid":
        return MALFORMED_BODY
    if err.get("type") == "missing":
        return "Required"
    message = str(err.get("msg", "Invalid value"))
    nested = [str(part) for part in err.get("loc", ())[2:]]
    return f"{'.'.join(nested)}: {message}" if nested else message


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        return JSON({"error": flatten_validation_errors(list(exc.errors()))}, status_code=400)

    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> Response:
        if isinstance(exc, InvalidField):
            return invalid(exc.message, exc.field)
        retry_after = getattr(exc, "retry_after_sec", None)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return error(service_status(exc), exc.message, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code in (404, 405) and unknown_route_refused(request):
            return error(401, "Unauthorized")
        if exc.status_code == 400:  # a body FastAPI could not read (not UTF-8, say)
            return invalid(MALFORMED_BODY)
        message = HTTP_MESSAGES.get(exc.status_code) or str(exc.detail)
        return error(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled_error", path=request.url.path, error_type=type(exc).__name__)
        return error(500, "Internal server error")
