"""The seeds' topology with TLS, for real: the repository's nginx site (rendered for this test's
ports and paths, by the code `bloom deploy render` runs) with a self-signed certificate, in front
of a real runtime and Membridge, both configured by a rendered env file (BLOOM_ENV_FILE).

Through HTTPS: the seeds' verification curls, the redirect from HTTP, HSTS, TLS 1.2 and 1.3,
the body limit, a task's live output (SSE) arriving before the task ends, a 30-second long-poll
claim (the slow one: 30 s), and the client's own address reaching the runtime's rate limits and
access log while a forged X-Forwarded-For, through nginx or straight to the runtime, changes
nothing. One stack for the module: about 45 s in all."""

import asyncio
import json
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bloom.deploy.render import Host, nginx_site, runtime_env
from tests.process.deploy.conftest import DOMAIN, host_for, private_file, self_signed
from tests.support.api import API, success
from tests.support.databases import fresh_sqlite_url
from tests.support.membridge import MembridgeProcess
from tests.support.net import free_port
from tests.support.nginx import AsyncSniTransport, Nginx, SniTransport, tool
from tests.support.server import RuntimeProcess

API_KEY = "deploy-test-runtime-key-0123456789"
ADMIN_KEY = "deploy-test-membridge-admin-key-0123"
TEST_CONNECTION_BUDGET = 3


@dataclass
class Site:
    host: Host
    nginx: Nginx
    runtime: RuntimeProcess
    membridge: MembridgeProcess
    ca: Path

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.host.https_port}"

    def tls(self, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if maximum is not None:
            context.maximum_version = maximum
        return context

    def client(self, source: str | None = None, **headers: str) -> httpx.Client:
        """A client of https://bloom.test (through nginx), from `source` (a loopback address)."""
        transport = SniTransport(DOMAIN, verify=self.tls(), local_address=source)
        return httpx.Client(base_url=self.https, transport=transport, headers=headers, timeout=60)

    def curl(self, *args: str) -> str:
        """curl as the seeds run it, with bloom.test resolved to this machine."""
        resolve = [
            arg
            for port in (self.host.http_port, self.host.https_port)
            for arg in ("--resolve", f"{DOMAIN}:{port}:127.0.0.1")
        ]
        done = subprocess.run(
            [tool("curl"), "-s", "--cacert", str(self.ca), *resolve, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    def url(self, path: str, scheme: str = "https") -> str:
        port = self.host.https_port if scheme == "https" else self.host.http_port
        return f"{scheme}://{DOMAIN}:{port}{path}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("site")
    env_file = tmp / "bloom-runtime.env"
    membridge = MembridgeProcess(tmp / "membridge", admin_key=None, BLOOM_ENV_FILE=str(env_file))
    runtime = RuntimeProcess(
        fresh_sqlite_url(sqlite_template, tmp),
        tmp / "data",
        BLOOM_ENV_FILE=str(env_file),
        BLOOM_MEMBRIDGE_URL=membridge.url,
        BLOOM_ACCESS_LOG="true",
        BLOOM_RATE_LIMIT_ENABLED="true",
        BLOOM_RATE_LIMIT_API="1000",
        BLOOM_RATE_LIMIT_TEST_CONNECTION=str(TEST_CONNECTION_BUDGET),
    )
    host = host_for(
        tmp,
        http_port=free_port(),
        https_port=free_port(),
        runtime_port=runtime.port,
        membridge_port=membridge.port,
    )
    # The env file as rendered for the host (loopback proxies trusted, JSON logs), its secrets
    # known to the test.
    private_file(env_file, runtime_env(host, ADMIN_KEY, API_KEY))
    ca = self_signed(host)
    nginx = Nginx(tmp / "nginx", nginx_site(host))
    served = Site(host, nginx, runtime, membridge, ca)
    try:
        with ThreadPoolExecutor() as starting:
            list(starting.map(lambda server: server.start(), (membridge, runtime)))
        nginx.start([host.http_port, host.https_port])
        yield served
    finally:
        nginx.stop()
        runtime.stop()
        membridge.stop()


def test_the_seeds_verification_curls_answer_through_https(site: Site) -> None:
    code = ["-o", "/dev/null", "-w", "%{http_code}"]
    key = ["-H", f"X-Runtime-API-Key: {API_KEY}"]
    assert site.curl(*code, site.url("/")) == "303"  # the dashboard asks for a login
    assert site.curl(*code, "-L", site.url("/")) == "200"
    assert site.curl(*code, site.url("/api/runtime/stats")) == "401"  # behind nginx: a key
    stats = json.loads(site.curl(*key, site.url("/api/runtime/stats")))
    assert set(stats) >= {"tasks", "leases", "workers"}
    health = json.loads(site.curl(site.url("/api/runtime/health")))
    assert (health["status"], health["service"]) == ("ok", "bloom-runtime")
    connection = json.loads(site.curl("-X", "POST", site.url("/api/runtime/test-connection")))
    assert connection["connected"] is True
    assert connection["health"]["status"] == "ok"
    membridge = json.loads(site.curl(site.url("/membridge/health")))
    assert (membridge["status"], membridge["service"]) == ("ok", "membridge-control-plane")
    assert site.curl(*code, site.url("/membridge/agents")) == "401"  # Membridge's own key
    agents = site.curl("-H", f"X-MEMBRIDGE-ADMIN: {ADMIN_KEY}", site.url("/membridge/agents"))
    assert json.loads(agents) == []  # nobody registered yet
    assert site.curl(*code, *key, site.url("/api/membridge/health")) == "200"
    css = site.curl("-D", "-", "-o", "/dev/null", site.url("/static/dashboard.css"))
    assert css.startswith("HTTP/")
    assert " 200" in css.splitlines()[0]
    assert "content-type: text/css" in css.lower()


def test_http_redirects_to_https_and_https_answers_with_hsts(site: Site) -> None:
    redirect = site.curl(
        "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
        site.url("/api/runtime/stats?limit=5", "http"),
    )  # fmt: skip
    assert redirect == f"301 {site.url('/api/runtime/stats?limit=5')}"
    challenge = Path(site.host.acme_root) / ".well-known/acme-challenge/token-1"
    challenge.parent.mkdir(parents=True)
    challenge.write_text("token-1.proof")
    assert site.curl(site.url("/.well-known/acme-challenge/token-1", "http")) == "token-1.proof"
    with site.client() as http:
        for path, status in (("/api/runtime/health", 200), (f"{API}/stats", 401), ("/nope", 404)):
            answer = http.get(path)
            assert answer.status_code == status
            assert answer.headers["strict-transport-security"] == "max-age=63072000"


@pytest.mark.parametrize(
    ("maximum", "version"), [(None, "TLSv1.3"), (ssl.TLSVersion.TLSv1_2, "TLSv1.2")]
)
def test_tls_1_2_and_1_3_with_forward_secret_ciphers(
    site: Site, maximum: ssl.TLSVersion | None, version: str
) -> None:
    with (
        socket.create_connection(("127.0.0.1", site.host.https_port), timeout=10) as raw,
        site.tls(maximum).wrap_socket(raw, server_hostname=DOMAIN) as tls,
    ):
        assert tls.version() == version
        cipher = tls.cipher()
        assert cipher is not None
        assert cipher[0].startswith(("TLS_", "ECDHE-"))  # 1.3's suites, or ECDHE on 1.2


def test_the_proxy_and_the_runtime_share_one_body_limit(site: Site) -> None:
    with site.client(**{"X-Runtime-API-Key": API_KEY}) as http:
        too_large = http.post(f"{API}/llm-tasks", content=b"x" * (6 * 1024 * 1024))
        assert too_large.status_code == 413
        assert "nginx" in too_large.text  # refused at the door, never sent on
        below = http.post(
            f"{API}/llm-tasks",
            content=b'{"prompt": "' + b"x" * (4 * 1024 * 1024) + b'"}',
            headers={"Content-Type": "application/json"},
        )
        assert below.status_code == 400  # the runtime read it: too long a prompt, not too large


async def test_a_tasks_live_output_streams_through_the_proxy_before_it_ends(site: Site) -> None:
    transport = AsyncSniTransport(DOMAIN, verify=site.tls())
    headers = {"X-Runtime-API-Key": API_KEY}
    async with httpx.AsyncClient(
        base_url=site.https, transport=transport, headers=headers, timeout=30
    ) as http:
        worker = {"name": "w-sse", "capabilities": {"claude_cli": True, "max_concurrency": 1}}
        assert (await http.post(f"{API}/workers", json=worker)).status_code in (200, 201)
        body = {"context_id": "c-sse", "agent_slug": "default", "prompt": "stream me"}
        task_id = (await http.post(f"{API}/llm-tasks", json=body)).json()["id"]
        grant = (await http.post(f"{API}/workers/w-sse/claim", json={"wait_seconds": 5})).json()
        assert grant["task"]["id"] == task_id
        lease = grant["lease"]["id"]
        async with http.stream("GET", f"{API}/llm-tasks/{task_id}/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            sent_at = time.monotonic()
            appended = await http.post(
                f"{API}/llm-tasks/{task_id}/events",
                json={"lease_id": lease, "worker_id": "w-sse",
                      "events": [{"type": "text", "data": "first words"}]},
            )  # fmt: skip
            assert appended.status_code == 200, appended.text
            first = await asyncio.wait_for(_next_data(lines), timeout=5)
            arrived_after = time.monotonic() - sent_at
            assert first["data"] == "first words"
            assert first["seq"] == 1
            task = (await http.get(f"{API}/llm-tasks/{task_id}")).json()
            assert task["status"] in ("leased", "running")  # still going: nothing was held back
            done = await http.post(
                f"{API}/llm-tasks/{task_id}/complete",
                json={"lease_id": lease, "worker_id": "w-sse", **success("finished")},
            )
            assert done.status_code == 200, done.text
            end = await asyncio.wait_for(_next_data(lines), timeout=10)
            assert end == {"status": "completed"}
    assert arrived_after < 3, f"the first event took {arrived_after:.1f}s through nginx"


async def _next_data(lines: object) -> dict[str, object]:
    async for line in lines:  # type: ignore[attr-defined]
        if line.startswith("data: "):
            value: dict[str, object] = json.loads(line.removeprefix("data: "))
            return value
    raise AssertionError("the stream ended")


def test_a_30_second_long_poll_claim_survives_the_proxy(site: Site) -> None:
    """SLOW (30-60 s): a worker's claim of 60 s waits at least 30 s for work through nginx (it
    ends on its worker's phase, in the second half of its wait) and gets its answer (204, no
    work), not the proxy's 504. Claims may wait up to 120 s; nginx waits 150 s."""
    with site.client(**{"X-Runtime-API-Key": API_KEY}) as http:
        worker = {"name": "w-poll", "capabilities": {"claude_cli": True, "max_concurrency": 1}}
        assert http.post(f"{API}/workers", json=worker).status_code in (200, 201)
        started = time.monotonic()
        claim = http.post(f"{API}/workers/w-poll/claim", json={"wait_seconds": 60})
        waited = time.monotonic() - started
    assert claim.status_code == 204, claim.text
    assert 29.5 <= waited < 75


def test_the_runtime_knows_each_caller_by_its_own_address_behind_nginx(site: Site) -> None:
    """Rate limits and the access log see the address nginx saw; a forged X-Forwarded-For,
    through nginx or straight to the runtime, is nobody's new identity."""
    path = f"{API}/test-connection"  # public; TEST_CONNECTION_BUDGET a minute per caller
    over = [200] * TEST_CONNECTION_BUDGET + [429]
    with site.client("127.0.0.2") as caller:
        assert [caller.post(path).status_code for _ in over] == over
        forged = caller.post(path, headers={"X-Forwarded-For": "203.0.113.7"})
        assert forged.status_code == 429  # still 127.0.0.2, whatever it claims
    with site.client("127.0.0.3") as neighbour:
        assert neighbour.post(path).status_code == 200  # a bucket of its own
    with site.client("127.0.0.4") as forger:
        got = [
            forger.post(path, headers={"X-Forwarded-For": f"198.51.100.{n}"}).status_code
            for n in range(len(over))
        ]
        assert got == over  # one caller, however many addresses it names
    direct = httpx.Client(
        base_url=site.runtime.url, transport=httpx.HTTPTransport(local_address="127.0.0.5")
    )
    with direct:
        got = [
            direct.post(path, headers={"X-Forwarded-For": f"198.51.100.{n}"}).status_code
            for n in range(len(over))
        ]
        assert got == over  # not from a trusted proxy: the header is not even read
    time.sleep(0.3)  # the access line is written after the answer
    clients = {
        line["client"]
        for line in map(json.loads, _json_lines(site.runtime.log()))
        if line.get("event") == "request" and line.get("path") == path
    }
    assert clients >= {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
    assert all(client.startswith("127.0.0.") for client in clients), clients  # nothing forged


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]
