"""The error answers in the OpenAPI documents of both servers, as the apps really give them.

FastAPI documents only successes and its own 422. `document_errors` adds, to every operation,
what the HTTP layer answers whatever the route: the validation failure (the runtime's 400 in
zod's shape replaces FastAPI's 422), 404 for a path that names nothing, 413 for a body over the
limit; and, per operation, the refusals its use-case can give (`declared`). Each is described
with the app's own error body, so a client (or schemathesis) can rely on the document.
"""

import json
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI

Schema = dict[str, Any]
Declared = Mapping[tuple[str, str], Mapping[str, str]]
"""(METHOD, path template) → {status (or "default"): description}."""

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def message_schema(key: str) -> Schema:
    """`{"<key>": "<message>"}`."""
    return {
        "type": "object",
        "properties": {key: {"type": "string"}},
        "required": [key],
    }


ZOD_FLATTENED: Schema = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "formErrors": {"type": "array", "items": {"type": "string"}},
                "fieldErrors": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
            "required": ["formErrors", "fieldErrors"],
        }
    },
    "required": ["error"],
}


def document_errors(
    app: FastAPI,
    *,
    error: Schema,
    error_name: str,
    validation: tuple[str, Schema, str] | None = None,
    declared: Declared | None = None,
    under: Mapping[str, Mapping[str, str]] | None = None,
    with_body: Mapping[str, str] | None = None,
    everywhere: Mapping[str, str] | None = None,
) -> None:
    """Make `app.openapi()` describe the errors. `error` is the schema of the app's message body
    (stored as `components.schemas[error_name]`); `validation`, when given, is (name, schema,
    status) of the validation failure that replaces FastAPI's 422; `under` gives statuses of
    every operation under a path prefix, `with_body` of every operation that takes a body (413
    always), `everywhere` of any operation."""
    generate = app.openapi
    declared, under, everywhere = declared or {}, under or {}, everywhere or {}
    with_body = {"413": "Request body too large"} | dict(with_body or {})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components[error_name] = error
        ref = {"$ref": f"#/components/schemas/{error_name}"}
        invalid: Schema | None = None
        if validation is not None:
            name, body, status = validation
            components[name] = body
            invalid = {"$ref": f"#/components/schemas/{name}"}
        for path, item in schema.get("paths", {}).items():
            for method in METHODS:
                operation = item.get(method)
                if operation is not None:
                    _describe(operation, path, method, ref, invalid, validation, declared)
                    extra = [v for prefix, v in under.items() if path.startswith(prefix)]
                    if "requestBody" in operation:
                        extra.append(with_body)
                    for statuses in [*extra, everywhere]:
                        for status, text in statuses.items():
                            operation["responses"].setdefault(status, _answer(text, ref))
        if validation is not None and not _uses(schema, "HTTPValidationError"):
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _describe(
    operation: Schema,
    path: str,
    method: str,
    ref: Schema,
    invalid: Schema | None,
    validation: tuple[str, Schema, str] | None,
    declared: Declared,
) -> None:
    responses: Schema = operation.setdefault("responses", {})
    parameters = operation.get("parameters", [])
    has_input = bool(parameters) or "requestBody" in operation
    if validation is not None and invalid is not None:
        responses.pop("422", None)
        if has_input:
            responses.setdefault(validation[2], _answer("Invalid input", invalid))
    if any(parameter.get("in") == "path" for parameter in parameters):
        responses.setdefault("404", _answer("Not found", ref))
    for status, text in declared.get((method.upper(), path), {}).items():
        given = responses.get(status)
        if given is None:
            responses[status] = _answer(text, ref)
        elif validation is not None and invalid is not None and status == validation[2]:
            # the route's own refusal with the validation failure's status: either body
            both = {"anyOf": [invalid, ref]}
            responses[status] = _answer(f"{given['description']}; or: {text}", both)


def _answer(description: str, body: Schema) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": body}}}


def _uses(schema: Schema, name: str) -> bool:
    return f'"#/components/schemas/{name}"' in json.dumps(schema.get("paths", {}))
