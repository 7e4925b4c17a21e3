"""Browser login: the login page, logging in and out, and who the caller is.

The login form is protected from cross-site posting by a double-submit token (a random value in
both a cookie and the form); a login's own CSRF token protects logout and every other
state-changing request made with the login cookie.
"""

import html
import secrets
import time
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from bloom.domain.identity import Kind
from bloom.runtime.api.deps import Caller, Credentials
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
from bloom.web.client_address import client_scheme

router = APIRouter(tags=["session"])  # the OpenAPI tag, as published
MAX_FORM_BYTES = 8 * 1024

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · BLOOM Runtime</title></head>
<body><main><h1>BLOOM Runtime</h1>
{message}
<form method="post" action="/login">
<input type="hidden" name="csrf_token" value="{csrf}">
<input type="hidden" name="next" value="{next}">
<p><label>User <input name="username" autocomplete="username" required></label></p>
<p><label>Password <input name="password" type="password" autocomplete="current-password"
required></label></p>
<p><button type="submit">Log in</button></p>
</form></main></body></html>"""


def _codec(request: Request) -> LoginCodec:
    codec: LoginCodec = request.app.state.logins
    return codec


def _safe_next(target: str) -> str:
    """Only a path on this server, never another site (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def _set_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int, path: str
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="lax",
        secure=client_scheme(request.scope, request.app.state.trusted_proxies) == "https",
    )


def _login_page(request: Request, next_path: str, message: str, status: int) -> HTMLResponse:
    csrf = secrets.token_urlsafe(24)
    body = PAGE.format(
        csrf=csrf,
        next=html.escape(_safe_next(next_path)),
        message=f'<p role="alert">{html.escape(message)}</p>' if message else "",
    )
    page = HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})
    _set_cookie(page, request, LOGIN_CSRF_COOKIE, csrf, 3600, "/login")
    return page


@router.get("/login", include_in_schema=False)
async def login_page(
    request: Request, next: Annotated[str, Query(max_length=2000)] = "/"
) -> Response:
    return _login_page(request, next, "", 200)


async def _form(request: Request) -> dict[str, str] | None:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return None
    try:
        fields = parse_qs(body.decode(), max_num_fields=10, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}


@router.post("/login", include_in_schema=False)
async def login(request: Request, credentials: Credentials) -> Response:
    form = await _form(request) or {}
    next_path = _safe_next(form.get("next", "/"))
    if not token_matches(request.cookies.get(LOGIN_CSRF_COOKIE, ""), form.get("csrf_token")):
        return _login_page(request, next_path, "The form expired; please try again.", 403)
    user = await credentials.login(form.get("username", ""), form.get("password", ""))
    if user is None:
        return _login_page(request, next_path, "Wrong user or password.", 401)
    cookie, _ = _codec(request).issue(user.id, password_stamp(user.password), int(time.time()))
    done = RedirectResponse(next_path, status_code=303)
    _set_cookie(done, request, COOKIE, cookie, LIFETIME_SEC, "/")
    done.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return done


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    held: Login | None = getattr(request.state, "login", None)
    form = await _form(request) or {}
    presented = request.headers.get("x-csrf-token") or form.get("csrf_token")
    if held is not None and not token_matches(held.csrf, presented):
        return error(403, "Forbidden: CSRF token missing or wrong")
    done = RedirectResponse("/login", status_code=303)
    done.delete_cookie(COOKIE, path="/")
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
