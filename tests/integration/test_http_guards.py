"""What both servers do before any route runs: the body limit (413, declared or chunked, never
reading past the limit), the security headers (by content type: every HTML page gets a strict
CSP, the API docs exactly what Swagger UI needs), the opt-in HTTPS redirect behind a proxy,
control characters in paths and queries, and no stack trace in any error."""

import base64
import hashlib
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Message

from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.app import create_app as create_runtime
from bloom.web.guards import BodyLimitMiddleware
from bloom.web.settings import is_loopback
from tests.support.api import API
from tests.support.databases import fresh_sqlite_url, make_settings
from tests.support.membridge import membridge_settings

LIMIT = 4096
TOO_LARGE = {"error": "Request body too large"}
TASK = {"context_id": "c", "agent_slug": "a", "prompt": "hello"}


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bloom.test") as http:
            yield http


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    return fresh_sqlite_url(sqlite_template, tmp_path)


@pytest.fixture
async def runtime(sqlite_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(sqlite_url, tmp_path, max_body_bytes=LIMIT, rate_limit_enabled=False)
    async with serving(create_runtime(settings)) as http:
        yield http


@pytest.fixture
async def membridge(
    membridge_sqlite_template: Path, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    path = tmp_path / "membridge.db"
    shutil.copyfile(membridge_sqlite_template, path)
    settings = membridge_settings(
        f"sqlite:///{path}", tmp_path, max_body_bytes=LIMIT, rate_limit_enabled=False
    )
    async with serving(create_membridge(settings)) as http:
        yield http


@pytest.fixture(params=["runtime", "membridge"])
async def docs_page(
    request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path
) -> httpx.Response:
    if request.param == "runtime":
        app = create_runtime(make_settings(sqlite_url, tmp_path, rate_limit_enabled=False))
        path = "/api/docs"
    else:
        app = create_membridge(membridge_settings(sqlite_url, tmp_path, rate_limit_enabled=False))
        path = "/docs"
    transport = httpx.ASGITransport(app=app)  # the page needs no storage: no lifespan
    async with httpx.AsyncClient(transport=transport, base_url="http://bloom.test") as http:
        page = await http.get(path)
        for asset, media_type in (
            ("swagger-ui-bundle.js", "text/javascript"),
            ("swagger-ui.css", "text/css"),
        ):
            served = await http.get(f"{path}/{asset}")  # without a key, as the page is
            assert served.status_code == 200, asset
            assert served.headers["content-type"].startswith(media_type)
            assert len(served.content) > 100_000
        return page


async def chunks(total: int, size: int = 1024) -> AsyncIterator[bytes]:
    """A JSON body sent chunked (no Content-Length)."""
    body = b'{"context_id":"c","agent_slug":"a","prompt":"' + b"x" * total + b'"}'
    for start in range(0, len(body), size):
        yield body[start : start + size]


# ---- the body limit ----


async def test_a_declared_body_over_the_limit_is_413_in_each_apps_shape(
    runtime: httpx.AsyncClient, membridge: httpx.AsyncClient
) -> None:
    big = TASK | {"prompt": "x" * LIMIT}
    response = await runtime.post(f"{API}/llm-tasks", json=big)
    assert response.status_code == 413
    assert response.json() == TOO_LARGE
    assert "x-request-id" in response.headers
    assert (await runtime.get(f"{API}/llm-tasks")).json() == []
    refused = await membridge.post("/projects", json={"name": "p" * LIMIT})
    assert refused.status_code == 413
    assert refused.json() == {"detail": "Request body too large"}
    # at the limit, answered as usual
    assert (await runtime.post(f"{API}/llm-tasks", json=TASK)).status_code == 201


async def test_a_chunked_body_growing_past_the_limit_is_413(runtime: httpx.AsyncClient) -> None:
    response = await runtime.post(
        f"{API}/llm-tasks", content=chunks(3 * LIMIT), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json() == TOO_LARGE
    small = await runtime.post(
        f"{API}/llm-tasks", content=chunks(100), headers={"Content-Type": "application/json"}
    )
    assert small.status_code == 201, small.text


@pytest.mark.parametrize("declared", [True, False])
async def test_the_limit_is_never_read_past(declared: bool) -> None:
    """Declared too large: nothing is read at all. Chunked: reading stops at the chunk that
    crosses the limit."""
    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read it all"})

    pieces = [b"y" * 1000] * 50

    async def receive() -> Message:
        body = pieces.pop(0)
        seen.append(len(body))
        return {"type": "http.request", "body": body, "more_body": bool(pieces)}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"content-length", b"50000")] if declared else []
    guard = BodyLimitMiddleware(app, max_bytes=LIMIT, answer=b'{"error":"too large"}')
    await guard({"type": "http", "headers": headers, "path": "/"}, receive, send)
    assert sent[0]["status"] == 413
    assert sum(seen) == (0 if declared else 5000)


# ---- security headers ----


def inline_script_hash(page: str) -> str:
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return f"'sha256-{digest}'"


async def test_html_pages_get_a_strict_policy_and_json_only_nosniff(
    runtime: httpx.AsyncClient,
) -> None:
    for path in ("/", "/login"):  # any page, by its content type
        page = await runtime.get(path)
        assert page.headers["content-type"].startswith("text/html"), path
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        policy = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy
        assert "script-src 'self';" in policy
        assert "cdn.jsdelivr.net" not in policy
    api = await runtime.get(f"{API}/health")
    assert api.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" not in api.headers
    assert "x-frame-options" not in api.headers
    missing = await runtime.get(f"{API}/nothing-here")
    assert missing.headers["x-content-type-options"] == "nosniff"


async def test_the_docs_page_may_load_swagger_ui_and_nothing_else(
    docs_page: httpx.Response,
) -> None:
    page = docs_page
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    # its bundle from the server itself, and its own inline bootstrap by hash (no 'unsafe-inline')
    assert directives["script-src"] == f"'self' {inline_script_hash(page.text)}"
    assert directives["style-src"] == "'self' 'unsafe-inline'"
    assert directives["img-src"] == "'self' data:"
    assert directives["connect-src"] == "'self'"  # it fetches the OpenAPI document
    assert directives["frame-ancestors"] == "'none'"
    assert "http" not in policy  # no other origin at all
    assert "http" not in page.text
    docs = page.url.path
    assert f'src="{docs}/swagger-ui-bundle.js"' in page.text
    assert f'href="{docs}/swagger-ui.css"' in page.text
    assert page.headers["x-frame-options"] == "DENY"


# ---- the HTTPS redirect ----


async def test_the_https_redirect_is_off_by_default(runtime: httpx.AsyncClient) -> None:
    response = await runtime.get(f"{API}/stats", headers={"X-Forwarded-Proto": "http"})
    assert response.status_code == 200


async def test_the_https_redirect_behind_a_proxy(sqlite_url: str, tmp_path: Path) -> None:
    settings = make_settings(
        sqlite_url, tmp_path, https_redirect=True, allowed_hosts=("bloom.test", "bloom.example")
    )
    async with serving(create_runtime(settings)) as http:
        plain = {"X-Forwarded-Proto": "http", "Host": "bloom.example:8443"}
        moved = await http.get(f"{API}/llm-tasks?status=queued", headers=plain)
        assert moved.status_code == 301
        assert moved.headers["location"] == (
            "https://bloom.example:8443/api/runtime/llm-tasks?status=queued"
        )
        assert (await http.get(f"{API}/health", headers=plain)).status_code == 200
        secure = {"X-Forwarded-Proto": "https"}
        assert (await http.get(f"{API}/stats", headers=secure)).status_code == 200
        assert (await http.get(f"{API}/stats")).status_code == 200  # no proxy: served
        # a Host header that is not a host name is never put into a Location
        odd = await http.get(f"{API}/stats", headers={**plain, "Host": "evil.example/x"})
        assert odd.status_code != 301


# ---- control characters, and no stack traces ----


async def test_membridge_refuses_control_characters_in_paths_and_queries(
    membridge: httpx.AsyncClient,
) -> None:
    missing = await membridge.get("/jobs/a%00b")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Not Found"}
    refused = await membridge.get("/jobs?project=a%00")
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["query", "project"]
    nul = await membridge.post("/projects", json={"name": "a\x00b"})
    assert nul.status_code == 422
    unknown = await membridge.post("/projects", json={"name": "p", "colour": "blue"})
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["type"] == "extra_forbidden"


async def test_what_workers_send_to_membridge_is_accepted(membridge: httpx.AsyncClient) -> None:
    """The worker registers at Membridge with the body it gives the runtime (agent metadata
    included), and the reference agent heartbeats with its full payload."""
    registration = {
        "name": "w1",
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 2, "labels": []},
        "agent_version": "0.1.0",
        "os_info": "host / Linux x86_64",
        "install_method": "bloom",
    }
    assert (await membridge.post("/agents", json=registration)).status_code == 201
    beat = {
        "node_id": "n1",
        "canonical_id": "0123456789abcdef",
        "project_id": "garden",
        "obs_count": 3,
        "db_sha": "abc",
        "last_seen": 1764000000.5,
        "ip_addrs": ["10.0.0.5"],
        "agent_version": "0.4.0",
    }
    assert (await membridge.post("/agent/heartbeat", json=beat)).status_code == 200


async def test_an_unexpected_runtime_failure_is_a_json_500_without_a_trace(
    tmp_path: Path,
) -> None:
    """A database never migrated: every query fails for real, and the answer says only that."""
    settings = make_settings(
        f"sqlite:///{tmp_path / 'unmigrated.db'}", tmp_path, rate_limit_enabled=False
    )
    app = create_runtime(settings)
    async with app.router.lifespan_context(app):
        # as a server does: the app re-raises after its 500, the client sees only the 500
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://bloom.test") as http:
            response = await http.get(f"{API}/llm-tasks", headers={"X-Request-ID": "broken-1"})
    assert response.status_code == 500
    assert response.json() == {"error": "Internal server error"}
    assert response.headers["x-request-id"] == "broken-1"
    assert "Traceback" not in response.text
    assert "sqlite" not in response.text.lower()


def test_loopback_is_127_8_ipv6_one_and_localhost() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "", "10.0.0.1", "example.org", "localhost.example.org"):
        assert not is_loopback(host), host
