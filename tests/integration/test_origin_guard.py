"""Another site's page gets nothing from either server: in open mode (no key, everyone an admin)
only loopback and configured Host names are served (DNS rebinding: 421), and in every mode a
state change a browser marks as cross-site, sent without a preflight, is refused (403) before
anything changes. The servers' own pages and clients that send no Origin are served as before."""

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.app import create_app as create_runtime
from bloom.worker.agent_http import AgentSurface
from bloom.worker.agent_http import serving as agent_serving
from bloom.worker.settings import WorkerSettings
from tests.support.agent import runs_nothing
from tests.support.api import API, create_task, failure, register_worker
from tests.support.databases import fresh_sqlite_url, make_settings
from tests.support.membridge import membridge_settings
from tests.support.net import free_port

Serve = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]
LOCAL = "http://localhost:5000"
"""The base URL of the in-process clients below: a loopback Host, as `bloom up` serves."""
CROSS_SITE_SIMPLE = [  # what another site's page can send without a preflight
    {"Origin": "https://evil.example", "Content-Type": "text/plain"},
    {"Origin": "null"},  # a sandboxed frame
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/x-www-form-urlencoded"},
    {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},  # another local port
    {"Origin": "http://localhost:3000", "Content-Type": "multipart/form-data; boundary=x"},
]
SAME_ORIGIN = [  # the server's own pages (the reference's client: bodyless, no content type)
    {"Origin": LOCAL},
    {"Origin": LOCAL, "Sec-Fetch-Site": "same-origin"},
    {"Origin": "http://LOCALHOST:5000"},
    {},  # curl, scripts, the CLI, workers: no Origin at all
]


@asynccontextmanager
async def serving(app: FastAPI, base_url: str = LOCAL) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
            yield http


@pytest.fixture
def runtime(sqlite_template: Path, tmp_path: Path) -> Serve:
    """The runtime in open mode unless given `api_key`; only loopback Hosts unless told."""

    database = fresh_sqlite_url(sqlite_template, tmp_path)

    def serve(**overrides: Any) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        settings = make_settings(database, tmp_path, **({"allowed_hosts": ()} | overrides))
        return serving(create_runtime(settings))

    return serve


@pytest.fixture
def membridge(membridge_sqlite_template: Path, tmp_path: Path) -> Serve:
    """Membridge in dev mode (no admin key) unless given `admin_key`."""

    path = tmp_path / "membridge.db"
    shutil.copyfile(membridge_sqlite_template, path)

    def serve(**overrides: Any) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        values = {"allowed_hosts": ()} | overrides
        settings = membridge_settings(f"sqlite:///{path}", tmp_path, **values)
        return serving(create_membridge(settings))

    return serve


async def status_of(http: httpx.AsyncClient, task_id: str) -> str:
    return str((await http.get(f"{API}/llm-tasks/{task_id}")).json()["status"])


async def a_failed_task(http: httpx.AsyncClient) -> str:
    task = await create_task(http, max_attempts=1)
    await register_worker(http, "w1")
    assert (await http.post(f"{API}/llm-tasks/{task['id']}/lease")).status_code == 201
    done = await http.post(f"{API}/llm-tasks/{task['id']}/complete", json=failure())
    assert done.status_code == 200, done.text
    assert await status_of(http, task["id"]) in ("failed", "dead")
    return str(task["id"])


# ---- DNS rebinding: the Host in open mode ----


@pytest.mark.parametrize(
    "host", ["evil.example:5000", "evil.example", "localhost.evil.example", "10.0.0.7:5000"]
)
async def test_open_mode_refuses_a_rebinding_host_on_both_servers(
    runtime: Serve, membridge: Serve, host: str
) -> None:
    async with runtime() as http:
        refused = await http.get(f"{API}/llm-tasks", headers={"Host": host})
        assert refused.status_code == 421
        message = refused.json()["error"]
        assert "BLOOM_ALLOWED_HOSTS" in message
        assert "without RUNTIME_API_KEY" in message
        created = await http.post(
            f"{API}/llm-tasks",
            json={"context_id": "c", "agent_slug": "a", "prompt": "rm -rf ~"},
            headers={"Host": host},
        )
        assert created.status_code == 421
        assert (await http.get(f"{API}/health", headers={"Host": host})).status_code == 421
        assert (await http.get(f"{API}/llm-tasks")).json() == []
    async with membridge() as http:
        refused = await http.get("/projects", headers={"Host": host})
        assert refused.status_code == 421
        assert "BLOOM_ALLOWED_HOSTS" in refused.json()["detail"]
        assert "dev mode" in refused.json()["detail"]
        assert (
            await http.post("/projects", json={"name": "p"}, headers={"Host": host})
        ).status_code == 421
        assert (await http.get("/projects")).json() == []


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:5000",
        "LocalHost.:5000",
        "app.localhost:8080",
        "127.0.0.1",
        "127.0.0.1:5000",
        "127.9.8.7:1",
        "[::1]",
        "[::1]:5000",
    ],
)
async def test_open_mode_serves_loopback_hosts(runtime: Serve, membridge: Serve, host: str) -> None:
    async with runtime() as http:
        assert (await http.get(f"{API}/llm-tasks", headers={"Host": host})).status_code == 200
    async with membridge() as http:
        assert (await http.get("/projects", headers={"Host": host})).status_code == 200


@pytest.mark.parametrize("host", ["", "evil.example/x", "::1", "[evil]:5000", "a b"])
async def test_a_missing_or_malformed_host_is_refused_in_open_mode(
    runtime: Serve, host: str
) -> None:
    async with runtime() as http:
        refused = await http.get(f"{API}/llm-tasks", headers={"Host": host})
        assert refused.status_code == 421
        assert refused.json()["error"].startswith("A request without a valid Host")


async def test_configured_hosts_are_served(runtime: Serve, membridge: Serve) -> None:
    names = ("bloom.lan", "10.0.0.7", "fd00::7")
    async with runtime(allowed_hosts=names) as http:
        for host in ("bloom.lan:5000", "BLOOM.LAN", "10.0.0.7:5000", "[fd00::7]:5000"):
            answer = await http.get(f"{API}/llm-tasks", headers={"Host": host})
            assert answer.status_code == 200, host
        assert (
            await http.get(f"{API}/llm-tasks", headers={"Host": "other.lan"})
        ).status_code == 421
    async with membridge(allowed_hosts=names) as http:
        assert (await http.get("/projects", headers={"Host": "bloom.lan:8000"})).status_code == 200


async def test_with_keys_the_host_is_not_checked(runtime: Serve, membridge: Serve) -> None:
    """A rebinding page holds no key: with keys, any Host reaches the key check."""
    async with runtime(api_key="rt-key-0123456789") as http:
        host = {"Host": "evil.example:5000"}
        assert (await http.get(f"{API}/llm-tasks", headers=host)).status_code == 401
        keyed = host | {"X-Runtime-API-Key": "rt-key-0123456789"}
        assert (await http.get(f"{API}/llm-tasks", headers=keyed)).status_code == 200
    async with membridge(admin_key="mb-admin-key", dev=False) as http:
        host = {"Host": "evil.example:8000"}
        assert (await http.get("/projects", headers=host)).status_code == 401
        keyed = host | {"X-MEMBRIDGE-ADMIN": "mb-admin-key"}
        assert (await http.get("/projects", headers=keyed)).status_code == 200


# ---- cross-site state changes ----


@pytest.mark.parametrize("marks", CROSS_SITE_SIMPLE)
async def test_a_cross_site_simple_post_changes_nothing(
    runtime: Serve, marks: dict[str, str]
) -> None:
    async with runtime() as http:
        queued = (await create_task(http))["id"]
        cancel = await http.post(f"{API}/llm-tasks/{queued}/cancel", headers=marks)
        assert cancel.status_code == 403
        assert cancel.json()["error"].startswith("Cross-site request refused")
        assert await status_of(http, queued) == "queued"
        failed = await a_failed_task(http)
        before = await status_of(http, failed)
        requeue = await http.post(f"{API}/llm-tasks/{failed}/requeue", headers=marks)
        assert requeue.status_code == 403
        assert await status_of(http, failed) == before
        # with a body too: refused before it is read
        body = b'{"context_id":"c","agent_slug":"a","prompt":"planted"}'
        planted = await http.post(f"{API}/llm-tasks", content=body, headers=marks)
        assert planted.status_code == 403
        assert len((await http.get(f"{API}/llm-tasks")).json()) == 2


@pytest.mark.parametrize("marks", SAME_ORIGIN)
async def test_the_servers_own_pages_and_clients_without_origin_still_act(
    runtime: Serve, marks: dict[str, str]
) -> None:
    async with runtime() as http:
        queued = (await create_task(http))["id"]
        cancel = await http.post(f"{API}/llm-tasks/{queued}/cancel", headers=marks)
        assert cancel.status_code == 200, cancel.text
        assert await status_of(http, queued) == "cancelled"
        failed = await a_failed_task(http)
        requeue = await http.post(f"{API}/llm-tasks/{failed}/requeue", headers=marks)
        assert requeue.status_code == 200, requeue.text
        assert await status_of(http, failed) == "queued"


async def test_what_only_a_preflight_allows_is_not_taken_for_a_simple_request(
    runtime: Serve,
) -> None:
    """A JSON content type or the server's own header cannot come from another site without a
    CORS preflight, which the server never grants: such requests reach the route."""
    cross = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    async with runtime() as http:
        created = await http.post(
            f"{API}/llm-tasks",
            json={"context_id": "c", "agent_slug": "a", "prompt": "p"},
            headers=cross,
        )
        assert created.status_code == 201
        for header in ({"X-Runtime-API-Key": "x"}, {"HX-Request": "true"}, {"X-CSRF-Token": "t"}):
            cancel = await http.post(
                f"{API}/llm-tasks/{created.json()['id']}/cancel", headers=cross | header
            )
            assert cancel.status_code != 403, header
        assert (await http.get(f"{API}/llm-tasks", headers=cross)).status_code == 200


async def test_membridge_in_dev_mode_refuses_cross_site_changes(membridge: Serve) -> None:
    cross = {"Origin": "https://evil.example"}
    async with membridge() as http:
        assert (await http.post("/projects", json={"name": "p"})).status_code == 201
        # refused before the body is read, whatever the route would make of it
        planted = await http.post("/projects", content=b'{"name":"planted"}', headers=cross)
        assert planted.status_code == 403
        assert planted.json()["detail"].startswith("Cross-site request refused")
        text = cross | {"Content-Type": "text/plain"}
        assert (await http.delete("/projects/p", headers=text)).status_code == 403
        assert [p["name"] for p in (await http.get("/projects")).json()] == ["p"]
        own = await http.delete("/projects/p", headers={"Origin": LOCAL})
        assert own.status_code == 204


async def test_with_keys_cross_site_simple_requests_are_refused_too(runtime: Serve) -> None:
    """Keys are headers (preflighted) and a login needs its CSRF token; what needs neither (the
    public test-connection, the login form) is not another site's to send either."""
    async with runtime(api_key="rt-key-0123456789") as http:
        cross = {
            "Origin": "https://evil.example",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        for refused in (
            await http.post(f"{API}/test-connection", headers=cross),
            await http.post("/login", content=b"username=a&password=b", headers=cross),
        ):
            assert refused.status_code == 403
            assert refused.json()["error"].startswith("Cross-site request refused")
        keyed = {"X-Runtime-API-Key": "rt-key-0123456789", "Origin": "https://evil.example"}
        assert (await http.get(f"{API}/llm-tasks", headers=keyed)).status_code == 200


async def test_a_worker_agent_surface_keeps_other_sites_out_too() -> None:
    """The same terms on a worker's agent surface: keyless (loopback only) it answers only
    loopback Hosts; with its key, a cross-site simple POST is refused before the key is read."""
    keyless = WorkerSettings(name="n1", agent_port=free_port())
    async with agent_serving(AgentSurface(keyless, runs_nothing, list)):
        url = f"http://127.0.0.1:{keyless.agent_port}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            rebound = await http.get("/status", headers={"Host": "evil.example:8001"})
            assert rebound.status_code == 421
            assert rebound.json()["ok"] is False
            assert "BLOOM_AGENT_KEY" in rebound.json()["detail"]
            assert (await http.get("/status")).status_code == 200
    keyed = WorkerSettings(name="n1", agent_port=free_port(), agent_key="k" * 20)
    async with agent_serving(AgentSurface(keyed, runs_nothing, list)):
        url = f"http://127.0.0.1:{keyed.agent_port}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            forged = await http.post(
                "/execute-task",
                content='{"lease_id": "x"}',
                headers={"Origin": "https://evil.example", "Content-Type": "text/plain"},
            )
            assert forged.status_code == 403
            own = await http.get("/status", headers={"Host": "evil.example"})  # keyed: any Host
            assert own.status_code == 401
