"""Browser login: the login page, logging in and out, and who the caller is.

The login form is protected from cross-site posting by a double-submit token (a random value in
both a cookie and the form); a login's own CSRF token protects logout and every other
state-changing request made with the login cookie.
"""

import secrets
import time
from typing import Annotated, Literal, TypedDict
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from bloom.domain.errors import Throttled
from bloom.domain.identity import Kind
from bloom.runtime.access import LoginRequired, PageRefused
from bloom.runtime.api.deps import Caller, Credentials
from bloom.runtime.dashboard.templating import asset_version, environment, render
from bloom.runtime.http import JSON, error
from bloom.runtime.login import (
    COOKIE,
    LIFETIME_SEC,
    LOGIN_CSRF_COOKIE,
    Login,
    LoginCodec,
    password_stamp,
)
from bloom.runtime.login import csrf_matches as token_matches
from bloom.web.client_address import client_address, client_scheme
from bloom.web.forms import read_form

router = APIRouter(tags=["session"])  # the OpenAPI tag, as published
MAX_FORM_BYTES = 8 * 1024


def _codec(request: Request) -> LoginCodec:
    codec: LoginCodec = request.app.state.logins
    return codec


def _safe_next(target: str) -> str:
    """Only a path on this server, never another site (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def _set_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int, path: str
) -> None:
    response.set_cookie(name, value, max_age=max_age, **_cookie_attributes(request, path))


def _delete_cookie(response: Response, request: Request, name: str, path: str) -> None:
    """With the attributes it was set with: a browser may ignore a deletion that differs (a
    `Secure` cookie is replaced only by a `Secure` one)."""
    response.delete_cookie(name, **_cookie_attributes(request, path))


class _CookieAttributes(TypedDict):
    path: str
    httponly: bool
    samesite: Literal["lax"]
    secure: bool


def _cookie_attributes(request: Request, path: str) -> _CookieAttributes:
    secure = client_scheme(request.scope, request.app.state.trusted_proxies) == "https"
    return {"path": path, "httponly": True, "samesite": "lax", "secure": secure}


def _login_page(
    request: Request, next_path: str, message: str, status: int, retry_after: int | None = None
) -> HTMLResponse:
    csrf = secrets.token_urlsafe(24)
    body = (
        environment()
        .get_template("login.html")
        .render(csrf=csrf, next=_safe_next(next_path), message=message, assets=asset_version())
    )
    headers = {"Cache-Control": "no-store"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    page = HTMLResponse(body, status_code=status, headers=headers)
    _set_cookie(page, request, LOGIN_CSRF_COOKIE, csrf, 3600, "/login")
    return page


@router.get("/login", include_in_schema=False)
async def login_page(
    request: Request, next: Annotated[str, Query(max_length=2000)] = "/"
) -> Response:
    return _login_page(request, next, "", 200)


@router.post("/login", include_in_schema=False)
async def login(request: Request, credentials: Credentials) -> Response:
    form = await read_form(request, MAX_FORM_BYTES) or {}
    next_path = _safe_next(form.get("next", "/"))
    if not token_matches(request.cookies.get(LOGIN_CSRF_COOKIE, ""), form.get("csrf_token")):
        return _login_page(request, next_path, "The form expired; please try again.", 403)
    address = client_address(request.scope, request.app.state.trusted_proxies)
    try:
        user = await credentials.login(form.get("username", ""), form.get("password", ""), address)
    except Throttled as refused:
        wait = refused.retry_after_sec
        message = f"Too many failed logins: please try again in {wait} s."
        return _login_page(request, next_path, message, 429, retry_after=wait)
    if user is None:
        return _login_page(request, next_path, "Wrong user or password.", 401)
    cookie, _ = _codec(request).issue(user.id, password_stamp(user.password), int(time.time()))
    done = RedirectResponse(next_path, status_code=303)
    _set_cookie(done, request, COOKIE, cookie, LIFETIME_SEC, "/")
    _delete_cookie(done, request, LOGIN_CSRF_COOKIE, "/login")
    return done


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    held: Login | None = getattr(request.state, "login", None)
    form = await read_form(request, MAX_FORM_BYTES) or {}
    presented = request.headers.get("x-csrf-token") or form.get("csrf_token")
    if held is not None and not token_matches(held.csrf, presented):
        return error(403, "Forbidden: CSRF token missing or wrong")
    done = RedirectResponse("/login", status_code=303)
    _delete_cookie(done, request, COOKIE, "/")
    return done


@router.get("/api/runtime/session", summary="Who the caller is; a session's CSRF token")
async def current(request: Request, caller: Caller) -> JSON:
    held: Login | None = getattr(request.state, "login", None)
    return JSON(
        {
            "authenticated": caller.role is not None and caller.kind is not Kind.ANONYMOUS,
            "kind": caller.kind,
            "role": caller.role,
            "worker_id": caller.worker_id,
            "csrf_token": held.csrf if held else None,
        }
    )


def install_page_refusals(app: FastAPI) -> None:
    """A dashboard page asked for without a login goes to the login page, and comes back after
    it; an htmx request is told to send the whole page there (`HX-Redirect`). A page the role
    may not see answers 403 with a page that says so."""

    @app.exception_handler(PageRefused)
    async def _refused(request: Request, exc: PageRefused) -> Response:
        context = {"title": "Not for your role", "message": f"{exc} Ask an admin."}
        return render(request, "error.html", context, now=int(time.time() * 1000), status=403)

    @app.exception_handler(LoginRequired)
    async def _to_login(request: Request, exc: LoginRequired) -> Response:
        target = urlsplit(exc.target)
        back = target.path + (f"?{target.query}" if target.query else "")
        url = f"/login?{urlencode({'next': _safe_next(back)})}"
        if request.headers.get("hx-request") == "true":
            return Response(status_code=200, headers={"HX-Redirect": url})
        return RedirectResponse(url, status_code=303)
