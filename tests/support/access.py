"""Logging in as a browser does, and the admin key the access tests run with."""

import re

import httpx

from tests.support.api import API

ADMIN_KEY = "admin-key-0123456789abcdef"
HEADER = "X-Runtime-API-Key"


async def submit_login(
    client: httpx.AsyncClient, username: str, password: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, httpx.Response]:
    """The login page, then its form filled in and posted with the page's CSRF cookie (sent by
    hand, as a browser would even where the cookie is `Secure` and the test's URL is http)."""
    page = await client.get("/login", headers=headers)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    client.cookies.clear()
    done = await client.post(
        "/login",
        content=f"username={username}&password={password.replace(' ', '+')}"
        f"&csrf_token={token.group(1)}&next=/",
        headers=(headers or {})
        | {
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": f"bloom_login_csrf={page.cookies['bloom_login_csrf']}",
        },
    )
    return page, done


async def log_in(client: httpx.AsyncClient, username: str, password: str) -> dict[str, str]:
    """Log in through the form; the headers a browser would then send (cookie and CSRF)."""
    _, done = await submit_login(client, username, password)
    assert done.status_code == 303, done.text
    cookie = done.cookies["bloom_session"]
    client.cookies.clear()
    me = await client.get(f"{API}/session", headers={"Cookie": f"bloom_session={cookie}"})
    csrf = me.json()["csrf_token"]
    return {"Cookie": f"bloom_session={cookie}", "X-CSRF-Token": csrf}
