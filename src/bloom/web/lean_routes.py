"""A lean dispatch for a few hot routes: the same endpoint functions, without FastAPI's
per-request machinery where it does nothing for them.

FastAPI matches a request against its routes one by one and solves every dependency anew (a
signature inspected per request): for the seed's four-call cycle that was about a third of the
server's CPU (docs/benchmarks.md, 2026-11-27). A `LeanRoutes` route, first in the router, takes
the same requests when they are on the happy path: the method looked up, the routes' own
regexes matched, the body parsed and validated as FastAPI does it (`json.loads`, then the
route's own model in Python mode; orjson would read an integer past 64 bits as a float), the
app's dependencies (the access rule) called directly, the endpoint called with what FastAPI
would give it. Anything else (a body that is
not JSON, or that does not validate, a header that does not) is handed to FastAPI's routes with
the body replayed, so every refusal is FastAPI's own, byte for byte. Exceptions go where a
route's do: to the app's handlers, in the exception middleware around the router.

Only endpoints of a plain shape are taken (path parameters as `str`, the `Request`, at most
one body model, optional or not, and header parameters as `str | None`); `LeanRoutes` refuses
any other at start-up, so a route changed later cannot be served differently in silence.
"""

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from fastapi.params import Depends, Header
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Message, Receive, Scope, Send

Endpoint = Callable[..., Awaitable[Response]]
PLAN = "bloom.lean_plan"
DECLINED = "bloom.lean_declined"
"""Set in the scope of a request the lean routes hand to FastAPI's."""


class Unfit(TypeError):
    """An endpoint whose shape the lean dispatch does not serve."""


@dataclass(frozen=True, slots=True)
class _HeaderParam:
    name: str
    header: str
    adapter: TypeAdapter[Any]


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one route's endpoint is called: decided once, from its signature."""

    route: RouteContext
    """The route as the app serves it: its full path, the app's dependencies with its own."""
    endpoint: Endpoint
    path_params: tuple[str, ...]
    request_param: str | None
    body_param: str | None
    body_model: type[BaseModel] | None
    body_optional: bool
    headers: tuple[_HeaderParam, ...]
    checks: tuple[Callable[[Request], Awaitable[None]], ...]

    def arguments(self, request: Request, body: bytes) -> dict[str, Any] | None:
        """The endpoint's arguments, or None where FastAPI's own answer is wanted."""
        args: dict[str, Any] = {name: request.path_params[name] for name in self.path_params}
        if self.request_param is not None:
            args[self.request_param] = request
        if self.body_param is not None:
            model = self._body(request, body)
            if model is None and not (self.body_optional and not body):
                return None
            args[self.body_param] = model
        for param in self.headers:
            try:
                args[param.name] = param.adapter.validate_python(request.headers.get(param.header))
            except ValidationError:
                return None
        return args

    def _body(self, request: Request, body: bytes) -> BaseModel | None:
        if not body or self.body_model is None:
            return None
        content_type = request.headers.get("content-type", "")
        if not content_type.lower().startswith("application/json"):
            return None
        try:  # parsed by json.loads and validated in Python mode, exactly as FastAPI does it
            return self.body_model.model_validate(json.loads(body))
        except (ValueError, RecursionError, ValidationError):  # a parse error says FastAPI
            return None


class LeanRoutes(BaseRoute):
    """A route that serves `endpoints`' requests on their happy path (see the module)."""

    def __init__(self, routes: Sequence[BaseRoute], endpoints: Sequence[Endpoint]):
        chosen = {id(endpoint) for endpoint in endpoints}
        plans = [
            _plan(route)
            for route in iter_route_contexts(routes)
            if isinstance(route.original_route, APIRoute) and id(route.endpoint) in chosen
        ]
        if len(plans) != len(endpoints):
            raise Unfit("an endpoint of the lean routes is not a route of the app")
        self._by_method: dict[str, list[_Plan]] = {}
        for plan in plans:
            for method in plan.route.methods or ():
                self._by_method.setdefault(method, []).append(plan)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope.get(DECLINED):
            return Match.NONE, {}
        for plan in self._by_method.get(scope["method"], ()):
            found = plan.route.path_regex.match(get_route_path(scope))
            if found is not None:
                return Match.FULL, {
                    "endpoint": plan.route.endpoint,
                    "route": plan.route.original_route,
                    "path_params": {**scope.get("path_params", {}), **found.groupdict()},
                    PLAN: plan,
                }
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        plan: _Plan = scope[PLAN]
        messages = await _read_body(receive)
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        request = Request(scope, receive)
        request._body = body  # Starlette's cache of the body it would read
        whole = messages[-1]["type"] == "http.request"  # not cut short by a disconnect
        args = plan.arguments(request, body) if whole else None
        if args is None:  # FastAPI's own answer: the router again, this route declining
            scope[DECLINED] = True
            await scope["router"].app(scope, _replaying(messages, receive), send)
            return
        for check in plan.checks:
            await check(request)
        response = await plan.endpoint(**args)
        await response(scope, receive, send)


def _plan(route: RouteContext) -> _Plan:
    path_params = tuple(route.param_convertors)
    if any(type(c).__name__ != "StringConvertor" for c in route.param_convertors.values()):
        raise Unfit(f"{route.path}: only str path parameters are served")
    request_param = body_param = None
    body_model: type[BaseModel] | None = None
    body_optional = False
    headers: list[_HeaderParam] = []
    endpoint = route.endpoint
    if endpoint is None:
        raise Unfit(f"{route.path}: no endpoint")
    for name, param in inspect.signature(endpoint).parameters.items():
        annotation, default = param.annotation, param.default
        if name in path_params:
            continue
        if annotation is Request:
            request_param = name
        elif (model := _model_of(annotation)) is not None and body_param is None:
            if default not in (None, inspect.Parameter.empty):
                raise Unfit(f"{route.path}: a body's default other than None")
            body_param, body_model = name, model
            body_optional = default is None
        elif (info := _header_of(annotation)) is not None and default is None:
            header_name = (info.alias or name).replace("_", "-").lower()
            headers.append(_HeaderParam(name, header_name, TypeAdapter(annotation)))
        else:
            raise Unfit(f"{route.path}: parameter {name!r} is not served by the lean routes")
    checks = tuple(_check(dependency) for dependency in route.dependencies)
    return _Plan(
        route,
        endpoint,
        path_params,
        request_param,
        body_param,
        body_model,
        body_optional,
        tuple(headers),
        checks,
    )


def _model_of(annotation: Any) -> type[BaseModel] | None:
    options = get_args(annotation) if get_origin(annotation) is not None else (annotation,)
    models = [o for o in options if inspect.isclass(o) and issubclass(o, BaseModel)]
    others = [o for o in options if o is not type(None) and o not in models]
    return models[0] if len(models) == 1 and not others else None


def _header_of(annotation: Any) -> Header | None:
    metadata = getattr(annotation, "__metadata__", ())
    return next((m for m in metadata if isinstance(m, Header)), None)


def _check(dependency: Depends) -> Callable[[Request], Awaitable[None]]:
    call = dependency.dependency
    if call is None or not inspect.iscoroutinefunction(call):
        raise Unfit("only async dependencies are called by the lean routes")
    params = list(inspect.signature(call).parameters.values())
    if len(params) != 1 or params[0].annotation is not Request:
        raise Unfit(f"dependency {call.__name__}: only (request: Request) is served")
    return call


async def _read_body(receive: Receive) -> list[Message]:
    """The request's messages up to its body's last, or up to the client's disconnect."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """`receive` that gives `messages` again, in order, then what the server sends."""
    pending = iter(messages)

    async def replay() -> Message:
        return next(pending, None) or await receive()

    return replay
