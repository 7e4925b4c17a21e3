"""The runtime wired to a real Membridge: the proxy, the connection test, the worker sync, and
life without Membridge. Both are real processes; the runtime's database is each kind in turn
(the four long tests: one kind each)."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.membridge import ADMIN_KEY, MembridgeProcess
from tests.support.server import RuntimeProcess

API = "/api/runtime"
SYNC_SEC = 0.5
LIVE_SEC = 4.0
RUNTIME_KEY = "runtime-key-for-the-proxy-tests"
DOCUMENTED_AGENT = {
    "name": "worker-01",
    "status": "online",
    "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
}


# The four long ones run on one database each, two on either: what they test is the runtime's
# life beside Membridge, and the SQL under it is the same as the integration tests run on both.
ON_POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
ON_SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def membridge(tmp_path: Path) -> Iterator[MembridgeProcess]:
    process = MembridgeProcess(tmp_path / "membridge")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def runtime(
    database_url: str, tmp_path: Path, membridge: MembridgeProcess
) -> Iterator[RuntimeProcess]:
    process = RuntimeProcess(
        database_url,
        tmp_path,
        BLOOM_MEMBRIDGE_URL=membridge.url,
        MEMBRIDGE_ADMIN_KEY=ADMIN_KEY,
        RUNTIME_API_KEY=RUNTIME_KEY,
        BLOOM_WORKER_SYNC_SEC=str(SYNC_SEC),
        BLOOM_WORKER_LIVE_SEC=str(LIVE_SEC),
        BLOOM_MEMBRIDGE_RETRIES="1",
        BLOOM_ACCESS_LOG="true",
        BLOOM_LOG_LEVEL="debug",  # every line, routine ones too, is searched for secrets
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def http(runtime: RuntimeProcess) -> Iterator[httpx.Client]:
    headers = {"X-Runtime-API-Key": RUNTIME_KEY}
    with httpx.Client(base_url=runtime.url, headers=headers, timeout=30) as client:
        yield client


def eventually(check: Callable[[], Any], within: float, every: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy, or fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        outcome = check()
        if outcome:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: last {outcome!r}")
        time.sleep(every)


def workers(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for w in http.get(f"{API}/workers").json()}


def audit(http: httpx.Client, action: str) -> list[dict[str, Any]]:
    return [
        e for e in http.get(f"{API}/audit", params={"limit": 1000}).json() if e["action"] == action
    ]


def test_the_seed_verification_requests_through_the_proxy(
    http: httpx.Client, membridge: MembridgeProcess
) -> None:
    """The seed's membridge steps (/health, /agents, the documented registration body) give the
    documented answers directly and through /api/membridge/*, with the admin key added by the
    runtime and never shown."""
    direct = httpx.get(f"{membridge.url}/health").json()
    proxied = http.get("/api/membridge/health")
    assert proxied.status_code == 200
    assert proxied.json() == direct
    assert {k: direct[k] for k in ("status", "service", "version", "projects", "agents")} == {
        "status": "ok",
        "service": "membridge-control-plane",
        "version": "0.3.0",
        "projects": 0,
        "agents": 0,
    }
    public = httpx.get(str(http.base_url.join("/api/membridge/health")))  # no runtime key
    assert public.status_code == 200

    created = http.post("/api/membridge/agents", json=DOCUMENTED_AGENT)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "worker-01"
    listed = http.get("/api/membridge/agents").json()
    assert [(a["name"], a["status"], a["capabilities"]) for a in listed] == [
        ("worker-01", "online", DOCUMENTED_AGENT["capabilities"])
    ]
    with membridge.client() as direct_client:
        assert direct_client.get("/agents").json() == listed

    missing = http.delete("/api/membridge/agents/nobody")
    assert missing.status_code == 404
    assert missing.json()["error"].startswith("Membridge returned 404")
    for response in (proxied, created, missing):
        assert ADMIN_KEY not in response.text


def test_connection_test_is_audited_as_its_caller(
    http: httpx.Client, runtime: RuntimeProcess
) -> None:
    """test-connection is public (the seed's), and its audit entry names who asked: an anonymous
    caller by its address, never "admin"; the admin key as "admin"."""
    anonymous = httpx.post(f"{runtime.url}{API}/test-connection", timeout=30)
    assert anonymous.status_code == 200
    assert anonymous.json()["connected"] is True
    assert http.post(f"{API}/test-connection").json()["connected"] is True
    assert sorted(e["actor"] for e in audit(http, "connection_test")) == ["127.0.0.1", "admin"]


def test_connection_test_and_leadership_are_audited(http: httpx.Client) -> None:
    """test-connection answers connected with Membridge's health, and says so in the config and
    the audit; a primary chosen through the proxy is audited as leadership_promote."""
    answer = http.post(f"{API}/test-connection").json()
    assert answer["connected"] is True
    assert answer["health"]["service"] == "membridge-control-plane"
    config = http.get(f"{API}/config").json()
    assert config["connected"] is True
    assert isinstance(config["last_test"], int)
    assert config["admin_key_masked"] == f"{ADMIN_KEY[:4]}****{ADMIN_KEY[-4:]}"
    assert [e["detail"].startswith("Connection OK: ") for e in audit(http, "connection_test")] == [
        True
    ]

    chosen = http.post(
        "/api/membridge/projects/0123456789abcdef/leadership/select",
        json={"primary_node_id": "node-a", "lease_seconds": 60},
    )
    assert chosen.status_code == 200, chosen.text
    promoted = audit(http, "leadership_promote")
    assert [(e["entity_id"], e["detail"]) for e in promoted] == [
        ("0123456789abcdef", "Promoted primary to node-a for project 0123456789abcdef")
    ]


@ON_POSTGRESQL
def test_membridge_agents_become_workers_and_go_offline_when_gone(
    http: httpx.Client, membridge: MembridgeProcess
) -> None:
    """An agent registered at Membridge appears among the runtime's workers within a sync period
    and can take a lease; removed from Membridge, it goes offline once nothing was heard of it
    for the liveness window; a worker that registered and claims at the runtime directly stays
    online throughout, whatever Membridge says."""
    direct = http.post(
        f"{API}/workers", json={"name": "direct-01", "capabilities": {"max_concurrency": 1}}
    )
    assert direct.status_code == 201
    stop_claiming = threading.Event()
    first = {"context_id": "busy", "agent_slug": "a", "prompt": "keeps direct-01 busy"}
    assert http.post(f"{API}/llm-tasks", json=first).status_code == 201

    def claim_forever() -> None:
        """The direct worker's life: it takes the first task and works on it (heartbeats),
        and keeps asking for more (full, so it gets none: the later task stays for others)."""
        with httpx.Client(base_url=str(http.base_url), headers=http.headers, timeout=30) as own:
            held: dict[str, Any] | None = None
            while not stop_claiming.is_set():
                claim = own.post(f"{API}/workers/direct-01/claim", json={"wait_seconds": 0.3})
                if claim.status_code == 200:
                    held = claim.json()["lease"]
                if held is not None:
                    own.post(
                        f"{API}/llm-tasks/{held['task_id']}/heartbeat",
                        json={"lease_id": held["id"]},
                    )

    claimer = threading.Thread(target=claim_forever, daemon=True)
    claimer.start()
    eventually(lambda: workers(http)["direct-01"]["active_leases"] == 1, within=5)
    try:
        with membridge.client() as mb:
            listed = DOCUMENTED_AGENT | {"url": "http://10.9.9.7:8001"}
            assert mb.post("/agents", json=listed).status_code == 201
            registered = time.monotonic()
            synced = eventually(lambda: workers(http).get("worker-01"), within=SYNC_SEC * 4)
            assert time.monotonic() - registered < SYNC_SEC * 4
            assert (synced["status"], synced["source"], synced["capabilities"]) == (
                "online",
                "membridge",
                DOCUMENTED_AGENT["capabilities"],
            )
            assert [e["entity_id"] for e in audit(http, "worker_discovered")] == ["worker-01"]
            # whoever holds Membridge's key lists any URL: the runtime only notes it, and
            # calls it (with the node's key) once an admin approved it
            assert (synced["url"], synced["pending_url"]) == ("", listed["url"])
            assert [e["entity_id"] for e in audit(http, "worker_url_proposed")] == ["worker-01"]
            assert http.post(f"{API}/workers/worker-01/agent-restart").status_code == 400
            approved = http.post(f"{API}/workers/worker-01/approve-url", json={})
            assert approved.status_code == 200, approved.text
            assert (approved.json()["url"], approved.json()["pending_url"]) == (listed["url"], None)
            assert [e["entity_id"] for e in audit(http, "worker_url_approved")] == ["worker-01"]

            task = http.post(
                f"{API}/llm-tasks", json={"context_id": "c", "agent_slug": "a", "prompt": "p"}
            ).json()
            lease = http.post(
                f"{API}/llm-tasks/{task['id']}/lease", json={"worker_id": "worker-01"}
            )
            assert lease.status_code == 201, lease.text
            assert lease.json()["worker"]["id"] == "worker-01"

            assert mb.delete("/agents/worker-01").status_code == 204
            removed = time.monotonic()
        eventually(lambda: workers(http)["worker-01"]["status"] == "offline", within=LIVE_SEC + 4)
        assert time.monotonic() - removed >= LIVE_SEC - 2 * SYNC_SEC  # not before the window
        assert workers(http)["direct-01"]["status"] == "online"
        offline = [e["entity_id"] for e in audit(http, "worker_offline")]
        assert offline == ["worker-01"]
    finally:
        stop_claiming.set()
        claimer.join(timeout=10)


@ON_SQLITE
def test_a_reference_agent_that_only_heartbeats_membridge_stays_online(
    http: httpx.Client, membridge: MembridgeProcess
) -> None:
    """The reference's agent registers with the runtime once and then heartbeats only Membridge's
    `/agent/heartbeat`: it stays online while its heartbeats arrive, goes offline when they stop,
    and comes back with them. Membridge lists it in `GET /nodes`; the leadership answer carries
    the reference UI's names."""
    registered = http.post(
        f"{API}/workers",
        json={"name": "ref-node", "url": "http://10.9.9.9:8001", "status": "online"},
    )
    assert registered.status_code == 201
    beating = threading.Event()
    beating.set()
    stop = threading.Event()
    cid = "0123456789abcdef"

    def heartbeat() -> None:
        with membridge.client() as mb:
            while not stop.is_set():
                if beating.is_set():
                    mb.post("/agent/heartbeat", json={"node_id": "ref-node", "canonical_id": cid})
                time.sleep(0.5)

    beater = threading.Thread(target=heartbeat, daemon=True)
    beater.start()
    try:
        time.sleep(LIVE_SEC + 2 * SYNC_SEC)
        assert workers(http)["ref-node"]["status"] == "online"  # past the liveness window
        with membridge.client() as mb:
            [seen] = mb.get("/nodes").json()
            assert (seen["node_id"], seen["projects"]) == ("ref-node", 1)
            assert seen["last_seen"] > time.time() - 5
            lead = mb.get(f"/projects/{cid}/leadership").json()
            assert (lead["primary_node_id"], lead["needs_ui_selection"]) == (None, True)
        beating.clear()
        eventually(lambda: workers(http)["ref-node"]["status"] == "offline", within=LIVE_SEC + 4)
        beating.set()
        eventually(lambda: workers(http)["ref-node"]["status"] == "online", within=SYNC_SEC * 6)
    finally:
        stop.set()
        beater.join(timeout=10)


@ON_POSTGRESQL
def test_life_without_membridge_and_the_reconnection(
    http: httpx.Client, membridge: MembridgeProcess, runtime: RuntimeProcess
) -> None:
    """With Membridge stopped the runtime keeps serving and leasing while its health counts the
    failures; when Membridge returns, `connected` is true again without a restart."""

    def health() -> dict[str, Any]:
        return dict(http.get(f"{API}/health").json()["membridge"])

    eventually(lambda: health()["connected"], within=5)
    membridge.kill()

    first = eventually(lambda: health() if health()["consecutiveFailures"] > 0 else None, within=5)
    later = eventually(
        lambda: (
            health() if health()["consecutiveFailures"] > first["consecutiveFailures"] else None
        ),
        within=5,
    )
    assert later["connected"] is False
    assert later["lastError"]
    assert later["lastSuccess"] == first["lastSuccess"]

    task = http.post(f"{API}/llm-tasks", json={"context_id": "c", "agent_slug": "a", "prompt": "p"})
    assert task.status_code == 201
    assert http.post(f"{API}/workers", json={"name": "w-alone"}).status_code == 201
    claimed = http.post(f"{API}/workers/w-alone/claim", json={"wait_seconds": 1})
    assert claimed.status_code == 200
    assert claimed.json()["task"]["id"] == task.json()["id"]
    gateway = http.get("/api/membridge/health")
    assert gateway.status_code == 502
    assert gateway.json()["error"].startswith("Membridge unreachable")
    assert http.post(f"{API}/test-connection").json()["connected"] is False

    membridge.start()  # same port, same database
    back = eventually(lambda: health() if health()["connected"] else None, within=5)
    assert back["consecutiveFailures"] == 0
    assert back["lastError"] is None
    assert runtime.process is not None
    assert runtime.process.poll() is None  # never restarted


@ON_SQLITE
def test_no_secret_reaches_a_response_or_a_log_line(
    http: httpx.Client, membridge: MembridgeProcess, runtime: RuntimeProcess
) -> None:
    """The Membridge admin key and the runtime key appear in no runtime response and no line of
    its log, across everything that touches them: config, health, the proxy, test-connection,
    errors, and a failed upstream."""
    answers = [
        http.get(f"{API}/config"),
        http.get(f"{API}/health"),
        http.post(f"{API}/test-connection"),
        http.get("/api/membridge/agents"),
        http.post("/api/membridge/agents", json=DOCUMENTED_AGENT),
        http.post("/api/membridge/projects", json={"name": "p"}),
        http.get("/api/membridge/projects"),
        http.get("/api/membridge/projects/0123456789abcdef/leadership"),
        http.post(
            f"{API}/config",
            json={"membridge_server_url": membridge.url, "admin_key": ADMIN_KEY},
        ),
        http.get("/api/membridge/nope"),
        httpx.get(f"{runtime.url}{API}/stats", headers={"X-Runtime-API-Key": "wrong"}),
    ]
    membridge.kill()
    answers += [http.get("/api/membridge/health"), http.post(f"{API}/test-connection")]
    time.sleep(SYNC_SEC * 3)  # a few failed syncs reach the log
    runtime.stop()
    texts = [a.text + str(a.headers) for a in answers] + [runtime.log()]
    assert runtime.log().count('"event": "request"') >= len(answers)  # requests were logged
    for secret in (ADMIN_KEY, RUNTIME_KEY):
        assert not [t for t in texts if secret in t]
