"""The seed's API-key check: X-Runtime-API-Key on /api/runtime/* and /api/membridge/*."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.app import create_app
from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API
from tests.support.clock import FakeClock
from tests.support.databases import make_settings

KEY = "s3cret-runtime-key-0123456789"
HEADER = "X-Runtime-API-Key"
UNAUTHORIZED = {"error": "Unauthorized"}

PROTECTED = [
    ("GET", f"{API}/config"),
    ("POST", f"{API}/config"),
    ("GET", f"{API}/workers"),
    ("POST", f"{API}/workers"),
    ("GET", f"{API}/workers/w1"),
    ("DELETE", f"{API}/workers/w1"),
    ("POST", f"{API}/workers/w1/claim"),
    ("GET", f"{API}/llm-tasks"),
    ("POST", f"{API}/llm-tasks"),
    ("GET", f"{API}/llm-tasks/t1"),
    ("POST", f"{API}/llm-tasks/t1/lease"),
    ("POST", f"{API}/llm-tasks/t1/heartbeat"),
    ("POST", f"{API}/llm-tasks/t1/complete"),
    ("POST", f"{API}/llm-tasks/t1/cancel"),
    ("POST", f"{API}/llm-tasks/t1/requeue"),
    ("GET", f"{API}/leases"),
    ("GET", f"{API}/runs"),
    ("GET", f"{API}/artifacts"),
    ("GET", f"{API}/artifacts/a1"),
    ("GET", f"{API}/artifacts/a1/content"),
    ("GET", f"{API}/audit?limit=10"),
    ("GET", f"{API}/stats"),
    ("GET", f"{API}/no-such-route"),
    ("GET", "/api/membridge/projects"),
    ("GET", "/api/membridge/projects/abc/leadership"),
    ("GET", "/api/membridge/projects/abc/nodes"),
    ("POST", "/api/membridge/projects/abc/leadership/select"),
]


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    """The app under test requires KEY."""
    return make_settings(database_url, tmp_path, api_key=KEY)


async def send(
    client: httpx.AsyncClient, method: str, path: str, key: str | bytes | None = None
) -> httpx.Response:
    headers: dict[bytes, bytes] = {}
    if key is not None:
        headers[HEADER.encode()] = key if isinstance(key, bytes) else key.encode()
    body: dict[str, Any] | None = {} if method == "POST" else None
    return await client.request(method, path, headers=headers, json=body)


async def test_protected_routes_refuse_a_missing_or_wrong_key(client: httpx.AsyncClient) -> None:
    """Every /api/runtime and /api/membridge route (known or not) answers 401
    {"error":"Unauthorized"} without the header and with a wrong key."""
    for method, path in PROTECTED:
        for key in (None, "wrong-key"):
            response = await send(client, method, path, key)
            assert response.status_code == 401, (method, path, key, response.text)
            assert response.json() == UNAUTHORIZED
            assert response.headers["content-type"] == "application/json"


async def test_the_right_key_passes(client: httpx.AsyncClient) -> None:
    """With the right key every request reaches its route (whatever the route then answers:
    the Membridge proxy answers 502, as no Membridge runs for these tests)."""
    for method, path in PROTECTED:
        response = await send(client, method, path, KEY)
        assert response.status_code != 401, (method, path, response.text)
        if response.status_code == 502:
            assert path.startswith("/api/membridge/"), (method, path, response.text)
            assert response.json()["error"].startswith("Membridge unreachable")
        else:
            assert response.status_code < 500, (method, path, response.text)


async def test_refused_requests_change_nothing(client: httpx.AsyncClient) -> None:
    """A write without the key is refused before it runs: no task, no worker, no audit entry."""
    body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
    assert (await client.post(f"{API}/llm-tasks", json=body)).status_code == 401
    worker = {"name": "w1"}
    assert (await client.post(f"{API}/workers", json=worker)).status_code == 401
    authed = {HEADER: KEY}
    assert (await client.get(f"{API}/llm-tasks", headers=authed)).json() == []
    assert (await client.get(f"{API}/workers", headers=authed)).json() == []
    assert (await client.get(f"{API}/audit", headers=authed)).json() == []


async def test_the_right_key_works_end_to_end(client: httpx.AsyncClient) -> None:
    """With the key a client can create and read a task; the header name is case-insensitive."""
    body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
    created = await client.post(f"{API}/llm-tasks", json=body, headers={HEADER: KEY})
    assert created.status_code == 201
    task_id = created.json()["id"]
    got = await client.get(f"{API}/llm-tasks/{task_id}", headers={HEADER.lower(): KEY})
    assert got.status_code == 200
    assert got.json()["id"] == task_id
    upper = await client.get(f"{API}/llm-tasks/{task_id}", headers={HEADER.upper(): KEY})
    assert upper.status_code == 200


@pytest.mark.parametrize("path", [f"{API}/health", f"{API}/health?probe=1"])
async def test_health_stays_public(client: httpx.AsyncClient, path: str) -> None:
    """Health answers without a key (and with a wrong one): monitors need no secret."""
    for key in (None, "wrong-key"):
        response = await send(client, "GET", path, key)
        assert response.status_code == 200, (path, response.text)
        assert response.json()["status"] == "ok"


async def test_membridge_health_is_not_behind_the_key(client: httpx.AsyncClient) -> None:
    """The seed leaves /api/membridge/health public, like the runtime's own health."""
    response = await client.get("/api/membridge/health")
    assert response.status_code != 401


@pytest.mark.parametrize(
    "path", [f"{API}/healthz", f"{API}/health/x", f"{API}/healthcheck", "/api/runtime"]
)
async def test_only_the_exact_health_path_is_public(client: httpx.AsyncClient, path: str) -> None:
    """Paths that merely start like health, or the bare prefix, still need the key."""
    response = await client.get(path)
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


async def test_the_dashboard_asks_for_a_login_but_its_login_and_files_do_not(
    client: httpx.AsyncClient,
) -> None:
    """The seed served its SPA openly, and the SPA then could not call a keyed API at all (it
    sends no key). Ours: the login page and static files are open, every page asks for a login."""
    index = await client.get("/")
    assert index.status_code == 303
    assert index.headers["location"] == "/login?next=%2F"
    assert (await client.get("/login")).status_code == 200
    assert (await client.get("/static/dashboard.css")).status_code == 200
    assert (await client.get("/", headers={HEADER: KEY})).status_code == 200  # the admin key


@pytest.mark.parametrize(
    "presented",
    [
        pytest.param(b"", id="empty"),
        pytest.param(KEY[:-1].encode(), id="one-shorter"),
        pytest.param((KEY + "x").encode(), id="one-longer"),
        pytest.param((KEY + KEY).encode(), id="doubled"),
        pytest.param(KEY[:8].encode(), id="prefix"),
        pytest.param((" " + KEY).encode(), id="leading-space"),
        pytest.param(KEY.upper().encode(), id="other-case"),
        pytest.param("k" * 10_000, id="10000-chars"),
        pytest.param("ключ-ключ-ключ".encode(), id="utf8-bytes"),
        pytest.param(KEY.encode()[:-2] + "é".encode("latin-1") * 2, id="latin1-same-length"),
        pytest.param(b"\xff\xfe\xfd" * 10, id="latin1-bytes"),
        pytest.param(KEY.encode()[:-1] + b"\x80", id="high-byte-same-length"),
    ],
)
async def test_odd_header_values_are_refused_never_a_server_error(
    client: httpx.AsyncClient, presented: str | bytes
) -> None:
    """Empty, longer, shorter, huge and non-ASCII keys answer 401; the seed's comparison
    threw on non-ASCII (500), ours compares bytes in constant time."""
    response = await send(client, "GET", f"{API}/workers", presented)
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


@pytest.mark.parametrize("configured", [None, ""])
async def test_without_a_configured_key_everything_is_open(
    database_url: str, tmp_path: Path, clock: FakeClock, configured: str | None
) -> None:
    """RUNTIME_API_KEY unset or empty: no route asks for a key (the seed's development mode),
    and a stray header does no harm."""
    app = create_app(make_settings(database_url, tmp_path, api_key=configured), clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as open_client:
            for path in ("workers", "llm-tasks", "leases", "runs", "artifacts", "audit", "stats"):
                response = await open_client.get(f"{API}/{path}")
                assert response.status_code == 200, (path, response.text)
            created = await open_client.post(
                f"{API}/llm-tasks", json={"context_id": "c", "agent_slug": "a", "prompt": "p"}
            )
            assert created.status_code == 201
            stray = await open_client.get(f"{API}/stats", headers={HEADER: "anything"})
            assert stray.status_code == 200
            membridge = await open_client.get("/api/membridge/projects")
            assert membridge.status_code != 401
