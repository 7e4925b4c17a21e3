"""The control plane over HTTP, against a real `bloom membridge serve` on each database: the
reference's control-plane tests (REFERENCE_BEHAVIOUR §8.1, §8.2) with its bugs fixed, auth,
validation and error shapes, request ids.

One server per backend serves the whole module, so every test names its own projects, agents
and nodes (`unique()`) and reads only what it wrote.
"""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, insert
from sqlalchemy.pool import NullPool

from bloom.db.database import resolve_database
from bloom.domain.ids import canonical_id
from bloom.membridge.storage.tables import jobs
from tests.support.membridge import (
    ADMIN_HEADER,
    ADMIN_KEY,
    MembridgeProcess,
    fresh_membridge_postgres_url,
)
from tests.support.stack import wait_for

pytest_plugins = ["tests.membridge_fixtures"]

UNAUTHORIZED = {"detail": "Unauthorized — invalid or missing X-MEMBRIDGE-ADMIN header"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MembridgeProcess]:
    """One control plane per backend for the module (SQLite: the default file under the data
    dir; PostgreSQL: a database that already holds the runtime's schema)."""
    data_dir = tmp_path_factory.mktemp(f"membridge-{request.param}")
    url = None
    if request.param == "postgresql":
        url = fresh_membridge_postgres_url(request.getfixturevalue("membridge_postgres"))
    process = MembridgeProcess(data_dir, url)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def http(server: MembridgeProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


# ---- health and auth ----


def test_health_is_public_and_counts_projects_and_agents(
    server: MembridgeProcess, http: httpx.Client
) -> None:
    manual = [p for p in ok(http.get("/projects")) if p["source"] == "manual"]
    agents = ok(http.get("/agents"))
    health = ok(httpx.get(f"{server.url}/health"))  # no key
    bloom_version = health.pop("bloom_version")
    assert isinstance(bloom_version, str)
    assert bloom_version
    assert health == {
        "status": "ok",
        "service": "membridge-control-plane",
        "version": "0.3.0",
        "projects": len(manual),
        "agents": len(agents),
    }  # no "auth": it is enabled


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param([], id="no header"),
        pytest.param([(b"x-membridge-admin", b"wrong-key")], id="wrong key"),
        pytest.param([(b"x-membridge-admin", b"")], id="empty"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY.encode() + b"4")], id="key plus one"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY[:-1].encode())], id="key minus one"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY.upper().encode())], id="upper case"),
        pytest.param([(b"x-membridge-admin", "clé-admin-ключ".encode())], id="non-ascii utf8"),
        pytest.param([(b"x-membridge-admin", b"\xff\xfe\xe9")], id="non-utf8 bytes"),
        pytest.param([(b"x-membridge-admin", b"k" * 10_000)], id="10k chars"),
        pytest.param([(b"x-runtime-api-key", ADMIN_KEY.encode())], id="another header"),
    ],
)
def test_without_the_right_key_every_guarded_path_is_401(
    server: MembridgeProcess, headers: list[tuple[bytes, bytes]]
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for method, path in [
            ("GET", "/agents"),
            ("POST", "/agents"),
            ("GET", "/projects"),
            ("DELETE", "/projects/x"),
            ("POST", "/agent/heartbeat"),
            ("GET", "/projects/abc/leadership"),
            ("POST", "/projects/abc/leadership/select"),
            ("GET", "/jobs"),
            ("GET", "/no/such/path"),
        ]:
            response = client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json() == UNAUTHORIZED
            assert response.headers["x-request-id"]


def test_the_right_key_opens_and_the_public_paths_need_none(server: MembridgeProcess) -> None:
    assert httpx.get(f"{server.url}/projects", headers={ADMIN_HEADER: ADMIN_KEY}).status_code == 200
    for path in ("/health", "/openapi.json", "/docs"):
        assert httpx.get(f"{server.url}{path}").status_code == 200, path
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["info"]["version"] == "0.3.0"
    assert "/agent/heartbeat" in spec["paths"]


def test_request_ids_are_echoed_or_made(server: MembridgeProcess, http: httpx.Client) -> None:
    given = http.get("/agents", headers={"X-Request-ID": "trace-42.a_b"})
    assert given.headers["x-request-id"] == "trace-42.a_b"
    made = http.get("/agents")
    assert len(made.headers["x-request-id"]) == 12
    refused = httpx.get(f"{server.url}/agents", headers={"X-Request-ID": "refused-1"})
    assert refused.status_code == 401
    assert refused.headers["x-request-id"] == "refused-1"
    unsafe = http.get("/agents", headers={"X-Request-ID": "a b<script>"})
    assert unsafe.headers["x-request-id"] != "a b<script>"


def test_unknown_paths_and_methods_answer_json(http: httpx.Client) -> None:
    missing = http.get("/no/such/path")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = http.put("/agents")
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})


def test_access_log_lines_are_json_without_bodies(
    server: MembridgeProcess, http: httpx.Client
) -> None:
    marker = unique("body-marker")
    ok(http.post("/projects", json={"name": marker}, headers={"X-Request-ID": marker}), 201)

    def logged() -> list[str]:
        return [line for line in server.log().splitlines() if f'"request_id": "{marker}"' in line]

    lines = wait_for(logged, 5, "the request's access line")  # written once the answer is sent
    assert len(lines) == 1
    assert '"path": "/projects"' in lines[0]
    assert '"status": 201' in lines[0]
    assert lines[0].count(marker) == 1  # the id only: the body is never logged
    assert ADMIN_KEY not in server.log()


# ---- projects ----


def test_projects_create_duplicate_list_delete(http: httpx.Client) -> None:
    first, second = unique("proj"), unique("proj")
    before = time.time()
    created = ok(http.post("/projects", json={"name": first}), 201)
    assert created["name"] == first
    assert created["canonical_id"] == canonical_id(first)
    assert len(created["canonical_id"]) == 16
    assert isinstance(created["created_at"], float)
    assert created["created_at"] >= before - 5
    assert (created["last_seen"], created["nodes_count"], created["source"]) == (None, 0, "manual")
    duplicate = http.post("/projects", json={"name": first})
    assert (duplicate.status_code, duplicate.json()) == (
        409,
        {"detail": f"Project '{first}' already exists"},
    )
    ok(http.post("/projects", json={"name": second}), 201)
    listed = {p["name"]: p for p in ok(http.get("/projects"))}
    assert listed[first] == created
    assert listed[second]["source"] == "manual"
    assert http.delete(f"/projects/{first}").status_code == 204
    gone = http.delete(f"/projects/{first}")
    assert (gone.status_code, gone.json()) == (404, {"detail": f"Project '{first}' not found"})
    assert first not in {p["name"] for p in ok(http.get("/projects"))}


@pytest.mark.parametrize(
    "body", [{}, {"name": ""}, {"name": "x" * 129}, {"name": 7}, {"name": None}]
)
def test_invalid_project_bodies_are_422_in_fastapi_shape(http: httpx.Client, body: Any) -> None:
    response = http.post("/projects", json=body)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert isinstance(errors, list)
    assert errors
    assert errors[0]["loc"] == ["body", "name"]


def test_malformed_json_is_422(http: httpx.Client) -> None:
    response = http.post(
        "/projects", content=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_a_project_name_with_a_slash_can_be_deleted(http: httpx.Client) -> None:
    name = f"team/{unique('proj')}"
    created = ok(http.post("/projects", json={"name": name}), 201)
    assert created["canonical_id"] == canonical_id(name)
    assert http.delete(f"/projects/{name}").status_code == 204
    assert name not in {p["name"] for p in ok(http.get("/projects"))}


# ---- agents ----


def test_the_seed_registration_is_201_and_listed_with_its_capabilities(
    http: httpx.Client,
) -> None:
    name = unique("worker")
    body = {
        "name": name,
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
    }
    agent = ok(http.post("/agents", json=body), 201)
    assert agent == {
        "name": name,
        "url": "",
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
        "registered_at": agent["registered_at"],
        "last_seen": None,
    }
    assert isinstance(agent["registered_at"], float)
    listed = [a for a in ok(http.get("/agents")) if a["name"] == name]
    assert listed == [agent]


def test_the_reference_registration_is_201_with_status_unknown(http: httpx.Client) -> None:
    name = unique("agent")
    agent = ok(http.post("/agents", json={"name": name, "url": "http://10.0.0.7:8001///"}), 201)
    assert (agent["name"], agent["status"], agent["url"]) == (
        name,
        "unknown",
        "http://10.0.0.7:8001",
    )
    assert agent["capabilities"] == {"claude_cli": True, "max_concurrency": 1, "labels": []}


def test_registering_again_is_200_and_keeps_what_is_not_sent(http: httpx.Client) -> None:
    name = unique("worker")
    first = ok(
        http.post(
            "/agents",
            json={
                "name": name,
                "url": "http://10.0.0.5:8001/",
                "status": "online",
                "capabilities": {"max_concurrency": 2, "labels": ["a"]},
            },
        ),
        201,
    )
    again = ok(http.post("/agents", json={"name": name, "capabilities": {"labels": ["b"]}}), 200)
    assert again == first | {
        "capabilities": {"claude_cli": True, "max_concurrency": 2, "labels": ["b"]}
    }
    third = ok(http.post("/agents", json={"name": name, "status": "offline"}), 200)
    assert (third["status"], third["url"], third["registered_at"]) == (
        "offline",
        "http://10.0.0.5:8001",
        first["registered_at"],
    )
    assert [a for a in ok(http.get("/agents")) if a["name"] == name] == [third]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": "w", "status": "busy"}, "status"),
        ({"name": "w", "url": "ftp://host"}, "url"),
        ({"name": "w", "url": "not a url"}, "url"),
        ({"name": "w", "capabilities": {"max_concurrency": 0}}, "capabilities"),
        ({"name": "w", "capabilities": {"max_concurrency": 33}}, "capabilities"),
        ({"name": "w", "capabilities": {"labels": "production"}}, "capabilities"),
    ],
)
def test_invalid_agent_bodies_are_422(http: httpx.Client, body: Any, field: str) -> None:
    response = http.post("/agents", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][1] == field


def test_agents_delete_204_then_404(http: httpx.Client) -> None:
    name = unique("worker")
    ok(http.post("/agents", json={"name": name}), 201)
    assert http.delete(f"/agents/{name}").status_code == 204
    gone = http.delete(f"/agents/{name}")
    assert (gone.status_code, gone.json()) == (404, {"detail": f"Agent '{name}' not found"})
    assert name not in {a["name"] for a in ok(http.get("/agents"))}


# ---- heartbeats and leadership (§8.2) ----


def beat(http: httpx.Client, node: str, cid: str, **fields: Any) -> dict[str, Any]:
    reply: dict[str, Any] = ok(
        http.post("/agent/heartbeat", json={"node_id": node, "canonical_id": cid} | fields)
    )
    return reply


def test_heartbeat_returns_ok_and_the_canonical_id(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert beat(http, "node-1", cid) == {"ok": True, "role": "unknown", "canonical_id": cid}


def test_unknown_project_has_no_nodes_then_a_heartbeat_adds_one(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert ok(http.get(f"/projects/{cid}/nodes")) == []
    before = time.time()
    beat(http, "node-1", cid, obs_count=5, db_sha="abc", last_seen=1000.5, ip_addrs=["10.0.0.1"])
    [node] = ok(http.get(f"/projects/{cid}/nodes"))
    assert node == {
        "node_id": "node-1",
        "canonical_id": cid,
        "role": "unknown",
        "obs_count": 5,
        "db_sha": "abc",
        "last_seen": node["last_seen"],
        "reported_last_seen": 1000.5,
        "ip_addrs": ["10.0.0.1"],
        "registered_at": node["registered_at"],
        "project_id": None,
        "agent_version": None,
    }
    # the server's clock, not the node's stale 1000.5
    assert node["last_seen"] >= before - 5
    assert node["registered_at"] == node["last_seen"]


def test_leadership_of_a_project_without_nodes(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert ok(http.get(f"/projects/{cid}/leadership")) == {
        "canonical_id": cid,
        "preferred_primary": None,
        "node_count": 0,
        "nodes": [],
        "epoch": 0,
        "issued_at": None,
        "expires_at": None,
        "lease_seconds": None,
        "expired": False,
    }


def test_select_after_two_heartbeats_sets_primary_and_secondary(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    beat(http, "node-a", cid)
    beat(http, "node-b", cid)
    reply = ok(http.post(f"/projects/{cid}/leadership/select", json={"primary_node_id": "node-a"}))
    assert reply["ok"] is True
    assert (reply["canonical_id"], reply["primary_node_id"]) == (cid, "node-a")
    assert (reply["lease_seconds"], reply["epoch"]) == (3600, 1)
    assert reply["expires_at"] == pytest.approx(reply["issued_at"] + 3600)
    assert reply["detail"].startswith("Leadership preference set: primary=node-a.")
    roles = {n["node_id"]: n["role"] for n in ok(http.get(f"/projects/{cid}/nodes"))}
    assert roles == {"node-a": "primary", "node-b": "secondary"}
    leadership = ok(http.get(f"/projects/{cid}/leadership"))
    assert (leadership["preferred_primary"], leadership["node_count"]) == ("node-a", 2)
    assert (leadership["epoch"], leadership["lease_seconds"], leadership["expired"]) == (
        1,
        3600,
        False,
    )
    assert (leadership["issued_at"], leadership["expires_at"]) == (
        reply["issued_at"],
        reply["expires_at"],
    )
    assert {n["node_id"]: n["role"] for n in leadership["nodes"]} == roles

    # later heartbeats: the chosen node is primary, others (even new ones) secondary
    assert beat(http, "node-a", cid)["role"] == "primary"
    assert beat(http, "node-b", cid)["role"] == "secondary"
    assert beat(http, "node-c", cid)["role"] == "secondary"

    # choosing again bumps the epoch and moves the roles
    again = ok(
        http.post(
            f"/projects/{cid}/leadership/select",
            json={"primary_node_id": "node-b", "lease_seconds": 60},
        )
    )
    assert (again["epoch"], again["lease_seconds"]) == (2, 60)
    assert beat(http, "node-a", cid)["role"] == "secondary"
    assert beat(http, "node-b", cid)["role"] == "primary"


def test_a_short_lease_expires_and_roles_become_unknown(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    beat(http, "node-a", cid)
    beat(http, "node-b", cid)
    body = {"primary_node_id": "node-a", "lease_seconds": 1}
    chosen = ok(http.post(f"/projects/{cid}/leadership/select", json=body))
    assert chosen["expires_at"] == pytest.approx(chosen["issued_at"] + 1)
    deadline = time.monotonic() + 15
    leadership = ok(http.get(f"/projects/{cid}/leadership"))
    while not leadership["expired"] and time.monotonic() < deadline:
        time.sleep(0.2)
        leadership = ok(http.get(f"/projects/{cid}/leadership"))
    assert leadership["expired"] is True
    assert (leadership["preferred_primary"], leadership["epoch"]) == ("node-a", 1)
    assert {n["role"] for n in leadership["nodes"]} == {"unknown"}
    assert beat(http, "node-a", cid)["role"] == "unknown"
    assert {n["role"] for n in ok(http.get(f"/projects/{cid}/nodes"))} == {"unknown"}
    renewed = ok(
        http.post(f"/projects/{cid}/leadership/select", json=body | {"lease_seconds": 600})
    )
    assert renewed["epoch"] == 2
    assert beat(http, "node-a", cid)["role"] == "primary"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"primary_node_id": ""},
        {"primary_node_id": "n", "lease_seconds": 0},
        {"primary_node_id": "n", "lease_seconds": 31_536_001},
        {"primary_node_id": "n", "lease_seconds": "forever"},
    ],
)
def test_invalid_selections_are_422_and_change_nothing(http: httpx.Client, body: Any) -> None:
    cid = canonical_id(unique("proj"))
    response = http.post(f"/projects/{cid}/leadership/select", json=body)
    assert response.status_code == 422
    assert ok(http.get(f"/projects/{cid}/leadership"))["epoch"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"canonical_id": "c"},
        {"node_id": "n"},
        {"node_id": "", "canonical_id": "c"},
        {"node_id": "n", "canonical_id": "a/b"},
        {"node_id": "n", "canonical_id": "c", "obs_count": -1},
        {"node_id": "n", "canonical_id": "c", "obs_count": 2**63},
        {"node_id": "n", "canonical_id": "c", "last_seen": -5},
        {"node_id": "n", "canonical_id": "c", "ip_addrs": "10.0.0.1"},
    ],
)
def test_invalid_heartbeats_are_422(http: httpx.Client, body: Any) -> None:
    assert http.post("/agent/heartbeat", json=body).status_code == 422


def test_heartbeat_projects_are_listed_and_merged(http: httpx.Client) -> None:
    manual, wild = unique("proj"), unique("wild")
    ok(http.post("/projects", json={"name": manual}), 201)
    beat(http, "node-a", canonical_id(manual), project_id=manual)
    beat(http, "node-b", canonical_id(manual))
    beat(http, "node-a", canonical_id(wild), project_id=wild)
    listed = {p["canonical_id"]: p for p in ok(http.get("/projects"))}
    mine = listed[canonical_id(manual)]
    assert (mine["name"], mine["source"], mine["nodes_count"]) == (manual, "manual", 2)
    assert isinstance(mine["last_seen"], float)
    found = listed[canonical_id(wild)]
    assert found == {
        "name": wild,
        "canonical_id": canonical_id(wild),
        "created_at": None,
        "last_seen": found["last_seen"],
        "nodes_count": 1,
        "source": "heartbeat",
    }
    names = [p["name"] for p in ok(http.get("/projects"))]
    assert names.index(manual) < names.index(wild)  # manual projects first


def test_a_heartbeat_brings_its_agent_online(http: httpx.Client) -> None:
    name = unique("worker")
    ok(http.post("/agents", json={"name": name}), 201)
    beat(http, name, canonical_id("any-project"), agent_version="0.4.0")
    [agent] = [a for a in ok(http.get("/agents")) if a["name"] == name]
    assert agent["status"] == "online"
    assert isinstance(agent["last_seen"], float)
    [node] = [
        n
        for n in ok(http.get(f"/projects/{canonical_id('any-project')}/nodes"))
        if n["node_id"] == name
    ]
    assert node["agent_version"] == "0.4.0"


# ---- jobs ----


def insert_jobs(server: MembridgeProcess, rows: list[dict[str, Any]]) -> None:
    """Write jobs behind the server's back (nothing in the API creates them yet)."""
    target = resolve_database(server.resolved_database_url, Path())
    engine = create_engine(target.sync_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(insert(jobs), rows)
    finally:
        engine.dispose()


def test_jobs_list_and_404(server: MembridgeProcess, http: httpx.Client) -> None:
    assert isinstance(ok(http.get("/jobs")), list)
    missing = http.get("/jobs/nonexistent")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Job 'nonexistent' not found"})
    project = unique("proj")
    base = {
        "action": "pull",
        "project": project,
        "agent": "worker-01",
        "canonical_id": canonical_id(project),
        "status": "completed",
        "detail": None,
        "stdout": None,
        "stderr": None,
        "returncode": None,
        "dryrun": False,
        "finished_at": None,
        "request_id": None,
    }
    ids = [unique("job") for _ in range(3)]
    insert_jobs(
        server,
        [
            base | {"id": ids[0], "created_at": 4_000_000_000_000},
            base | {"id": ids[1], "created_at": 4_000_000_001_000, "dryrun": True},
            base
            | {
                "id": ids[2],
                "created_at": 4_000_000_002_500,
                "finished_at": 4_000_000_003_000,
                "returncode": 1,
                "stderr": "boom",
                "status": "failed",
                "request_id": "req-1",
            },
        ],
    )
    newest = ok(http.get("/jobs", params={"project": project}))
    assert [j["id"] for j in newest] == [ids[2], ids[1], ids[0]]
    assert newest[0] == base | {
        "id": ids[2],
        "status": "failed",
        "detail": None,
        "stdout": None,
        "stderr": "boom",
        "returncode": 1,
        "dryrun": False,
        "created_at": 4_000_000_002.5,
        "finished_at": 4_000_000_003.0,
        "request_id": "req-1",
    }
    assert newest[1]["dryrun"] is True
    assert [j["id"] for j in ok(http.get("/jobs", params={"limit": 2}))] == [ids[2], ids[1]]
    assert ok(http.get(f"/jobs/{ids[1]}")) == newest[1]
    assert ok(http.get("/jobs", params={"project": unique("nobody")})) == []


@pytest.mark.parametrize("limit", ["0", "-1", "201", "ten"])
def test_jobs_limit_out_of_range_is_422(http: httpx.Client, limit: str) -> None:
    response = http.get("/jobs", params={"limit": limit})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]


def test_jobs_limit_bounds_are_accepted(http: httpx.Client) -> None:
    for limit in ("1", "200"):
        assert http.get("/jobs", params={"limit": limit}).status_code == 200
