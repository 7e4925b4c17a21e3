"""Membridge's error answers in its OpenAPI document (see `bloom.web.openapi_errors`)."""

from fastapi import FastAPI

from bloom.membridge.auth import UNAUTHORIZED
from bloom.membridge.settings import MembridgeSettings
from bloom.web.openapi_errors import Declared, document_errors, message_schema

ERRORS: Declared = {
    ("POST", "/projects"): {"409": "A project of that name exists"},
    ("POST", "/sync/pull"): {"404": "No such project or agent", "502": "The agent failed"},
    ("POST", "/sync/push"): {"404": "No such project or agent", "502": "The agent failed"},
    ("POST", "/projects/{canonical_id}/leadership/select"): {
        "502": "The lease could not be written to the memory bucket"
    },
}


def document_membridge_errors(app: FastAPI, settings: MembridgeSettings) -> None:
    document_errors(
        app,
        error=message_schema("detail"),
        error_name="Detail",
        declared=ERRORS,
        with_body={"400": "The body could not be read (not UTF-8, say)"},
        everywhere={} if settings.auth_disabled else {"401": UNAUTHORIZED},
    )
