"""The dashboard's templates: one Jinja2 environment, and rendering a page or one of its parts.

Autoescaping is on for every template and undefined names fail loudly. A page that polls for
fresh data asks its own URL again with `?part=NAME`, and gets only that part's template
(`parts/NAME.html`), rendered with the same context as the page.
"""

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from bloom import __version__
from bloom.domain.errors import NotFound
from bloom.domain.identity import Identity, Kind, Role
from bloom.runtime.dashboard import present
from bloom.runtime.login import Login

NAV = (
    ("/", "Overview"),
    ("/tasks", "Tasks"),
    ("/workers", "Workers"),
    ("/approvals", "Approvals"),
    ("/membridge", "Membridge"),
    ("/projects", "Projects"),
    ("/audit", "Audit"),
    ("/settings", "Settings"),
)
ADMIN_ONLY_NAV = frozenset({"/projects", "/settings"})
NO_STORE = {"Cache-Control": "no-store"}


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking at a page, and so what it shows them."""

    role: Role | None
    name: str
    csrf: str
    """The login's CSRF token, sent by every state-changing request (empty without a login)."""
    logged_in: bool

    @property
    def can_admin(self) -> bool:
        return self.role is Role.ADMIN


def viewer_of(request: Request) -> Viewer:
    identity: Identity | None = getattr(request.state, "identity", None)
    login: Login | None = getattr(request.state, "login", None)
    if identity is None:
        return Viewer(None, "", "", False)
    return Viewer(
        identity.role,
        identity.name if identity.kind is not Kind.ANONYMOUS else "",
        login.csrf if login else "",
        identity.kind is Kind.USER,
    )


@cache
def asset_version() -> str:
    """A digest of the static files, appended to their URLs so a new release is fetched anew."""
    digest = hashlib.sha256(__version__.encode())
    for asset in sorted(
        files("bloom.runtime.dashboard").joinpath("static").iterdir(), key=lambda item: item.name
    ):
        digest.update(asset.read_bytes())
    return digest.hexdigest()[:10]


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("bloom.runtime.dashboard", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=present.duration,
        absolute=present.absolute,
        iso=present.iso,
        size=present.size,
        short=present.short,
        clip=present.clip,
        percent=present.percent,
        usd=present.usd,
        as_ms=present.as_ms,
    )
    env.globals.update(ago=present.ago, version=__version__, nav=NAV, admin_nav=ADMIN_ONLY_NAV)
    return env


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    now: int,
    part: str | None = None,
    status: int = 200,
    parts: frozenset[str] = frozenset(),
) -> HTMLResponse:
    """The page, or the part of it named by `part` (404 for a part the page does not have)."""
    if part is not None and part not in parts:  # never the whole page where a part goes
        raise NotFound(f"This page has no part '{part}'")
    name = template if part is None else f"parts/{part}.html"
    full = {
        "request": request,
        "part_url": lambda name: part_url(request, name),
        "viewer": viewer_of(request),
        "now": now,
        "path": request.url.path,
        "assets": asset_version(),
        **context,
    }
    body = environment().get_template(name).render(full)
    return HTMLResponse(body, status_code=status, headers=NO_STORE)


def part_url(request: Request, name: str) -> str:
    """This page's URL, its query kept, asking for one part."""
    query = [(key, value) for key, value in request.query_params.multi_items() if key != "part"]
    return f"{request.url.path}?{urlencode([*query, ('part', name)])}"


def fragment(
    template: str, context: dict[str, Any], *, headers: dict[str, str] | None = None
) -> HTMLResponse:
    """A bit of HTML an action answers with (a notice, a row), outside any page."""
    body = environment().get_template(template).render(context)
    return HTMLResponse(body, headers={**NO_STORE, **(headers or {})})
