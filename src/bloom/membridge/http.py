"""Error answers in the reference's shape, `{"detail": …}`, and never a stack trace.

Validation failures keep FastAPI's 422 `{"detail": [...]}`; unknown paths answer FastAPI's 404
`{"detail": "Not Found"}`; a refused use-case answers its status with its message; anything
unexpected is logged and answers 500 `{"detail": "Internal server error"}`.
"""

import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bloom.domain.errors import BadGateway, Conflict, NotFound, ServiceError

SERVICE_STATUS: dict[type[ServiceError], int] = {NotFound: 404, Conflict: 409, BadGateway: 502}
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
