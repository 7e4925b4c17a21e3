"""Every request the seed documents (curl examples, endpoint tables; REFERENCE_BEHAVIOUR §1.5,
§1.6) works against a fresh real server, with the documented fields, on both databases.

Out of scope here (later issues): the /api/membridge/* proxy, test-connection, projects,
agent-health/update/restart/uninstall, agent-install-script and dispatch.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom import __version__
from tests.support.net import closed_port
from tests.support.server import RuntimeProcess

API = "/api/runtime"
FRESH_STATS = {
    "tasks": {"total": 0, "by_status": {}},
    "leases": {"total": 0, "active": 0},
    "workers": {"total": 0, "online": 0},
}
TASK_FIELDS = {
    "id",
    "context_id",
    "agent_slug",
    "prompt",
    "context_hints",
    "policy",
    "desired_format",
    "status",
    "created_at",
    "updated_at",
    "lease_id",
    "worker_id",
    "attempts",
    "max_attempts",
}
LEASE_FIELDS = {
    "id",
    "task_id",
    "worker_id",
    "started_at",
    "expires_at",
    "ttl_seconds",
    "status",
    "last_heartbeat",
    "context_id",
}
WORKER_FIELDS = {
    "id",
    "node_id",
    "url",
    "status",
    "capabilities",
    "last_heartbeat",
    "ip_addrs",
    "obs_count",
    "db_sha",
    "registered_at",
    "active_leases",
    "agent_version",
    "os_info",
    "install_method",
}
ARTIFACT_FIELDS = {
    "id",
    "task_id",
    "job_id",
    "type",
    "created_at",
    "finalized",
    "url",
    "entity_refs",
    "tags",
    "content",
}
RESULT_FIELDS = {
    "id",
    "task_id",
    "worker_id",
    "artifact_id",
    "status",
    "output",
    "error_message",
    "metrics",
    "completed_at",
}
AUDIT_FIELDS = {"id", "timestamp", "action", "entity_type", "entity_id", "actor", "detail"}

# The seed's worker registration (RUNTIME_GAPS_AND_NEXT_STEPS, GAP-4).
SEED_WORKER = {
    "name": "worker-01",
    "status": "online",
    "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
}
# What the seed's install script POSTs (REFERENCE_BEHAVIOUR §1.6, install script step 10).
INSTALL_SCRIPT_WORKER = {
    "name": "node-2",
    "url": "http://10.0.0.7:8001",
    "status": "online",
    "agent_version": "0.4.0",
    "os_info": "Alpine Linux v3.19",
    "install_method": "script",
}
# The reference agent's complete callbacks (REFERENCE_BEHAVIOUR §4.9): tokens_used is null.
AGENT_SUCCESS = {
    "status": "success",
    "output": "Hello from Claude",
    "error_message": None,
    "metrics": {"duration_ms": 1234, "tokens_used": None},
}
AGENT_ERROR = {
    "status": "error",
    "output": None,
    "error_message": "Claude CLI returned exit code 1",
    "metrics": {"duration_ms": 50, "tokens_used": None},
}
MINIMAL_TASK = {"context_id": "ctx-a", "agent_slug": "writer", "prompt": "Say hello"}
FULL_TASK = {
    "context_id": "ctx-b",
    "agent_slug": "architect",
    "prompt": "Summarise the design",
    "context_hints": ["docs/DESIGN.md", "@memory/recent"],
    "policy": {"timeout_sec": 600, "budget": 20000},
    "desired_format": "json",
    "max_attempts": 5,
}


@pytest.fixture
def http(runtime_process: RuntimeProcess) -> Iterator[httpx.Client]:
    """A plain HTTP client for the fresh real server."""
    with httpx.Client(base_url=runtime_process.url, timeout=30) as client:
        yield client


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.request.url, response.text)
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def audit(http: httpx.Client, limit: int = 1000) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = ok(http.get(f"{API}/audit", params={"limit": limit}))
    return entries


def assert_newest_first(entries: list[dict[str, Any]], key: str) -> None:
    stamps = [entry[key] for entry in entries]
    assert stamps == sorted(stamps, reverse=True)


def test_fresh_server_answers_the_seed_curls(
    http: httpx.Client, database_url: str, runtime_process: RuntimeProcess
) -> None:
    """The seed's verification curls on a fresh server: `/` and /stats answer 200, stats is
    exactly the documented empty shape, health has its fields, every list is empty, and
    missing things and unknown /api paths answer 404 JSON, never the SPA's HTML."""
    index = http.get("/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")

    assert ok(http.get(f"{API}/stats")) == FRESH_STATS

    health = ok(http.get(f"{API}/health"))
    assert health["status"] == "ok"
    assert health["service"] == "bloom-runtime"
    assert health["storage"] == (
        "postgresql" if database_url.startswith("postgresql") else "sqlite"
    )
    assert health["version"] == __version__
    assert isinstance(health["uptime"], int | float)
    assert 0 <= health["uptime"] < 600

    assert ok(http.get(f"{API}/config")) == {
        "membridge_server_url": runtime_process.membridge_url,  # the environment's, as no
        "admin_key_masked": "",  # config was saved yet (the default is tested in test_settings)
        "connected": False,
        "last_test": None,
    }

    for path in ("workers", "llm-tasks", "leases", "runs", "artifacts", "audit?limit=10"):
        assert ok(http.get(f"{API}/{path}")) == [], path

    assert ok(http.get(f"{API}/workers/worker-01"), 404) == {"error": "Worker not found"}
    assert ok(http.get(f"{API}/llm-tasks/no-such-task"), 404) == {"error": "Task not found"}
    for path in (f"{API}/no-such-route", "/api/nothing-here", f"{API}/llm-tasks/x/y/z"):
        assert ok(http.get(path), 404) == {"error": "Not found"}, path
    assert ok(http.delete(f"{API}/stats"), 405) == {"error": "Method not allowed"}

    assert ok(http.get(f"{API}/stats")) == FRESH_STATS  # reading wrote nothing


def test_config_get_and_post_mask_the_admin_key_and_persist(
    http: httpx.Client, runtime_process: RuntimeProcess
) -> None:
    """POST /config with the documented body {membridge_server_url, admin_key} answers the
    config with the key masked (first4****last4; **** up to 8 characters), never in clear;
    each update writes a config_updated audit entry; the values survive a restart."""
    cases = [
        ("abcd-secret-key-wxyz", "abcd****wxyz"),
        ("short", "****"),
        ("12345678", "****"),
        ("123456789", "1234****6789"),
    ]
    nowhere = runtime_process.membridge_url  # nothing listens there: `connected` stays false
    for key, masked in cases:
        body = {"membridge_server_url": nowhere, "admin_key": key}
        response = http.post(f"{API}/config", json=body)
        answer = ok(response)
        assert answer == {
            "membridge_server_url": nowhere,
            "admin_key_masked": masked,
            "connected": False,
            "last_test": None,
        }
        assert ok(http.get(f"{API}/config")) == answer
        if len(key) > 8:
            assert key not in response.text

    elsewhere = f"http://127.0.0.1:{closed_port()}"  # nothing there either
    moved = {"membridge_server_url": elsewhere, "admin_key": "zyxw-another-key-9876"}
    expected = {
        "membridge_server_url": elsewhere,
        "admin_key_masked": "zyxw****9876",
        "connected": False,
        "last_test": None,
    }
    assert ok(http.post(f"{API}/config", json=moved)) == expected

    entries = [e for e in audit(http) if e["action"] == "config_updated"]
    assert len(entries) == 5
    assert set(entries[0]) >= AUDIT_FIELDS
    assert [(e["entity_type"], e["entity_id"], e["actor"], e["detail"]) for e in entries] == [
        ("runtime_config", "singleton", "admin", f"Updated membridge URL to {elsewhere}")
    ] + [("runtime_config", "singleton", "admin", f"Updated membridge URL to {nowhere}")] * 4
    assert all("zyxw-another-key-9876" not in e["detail"] for e in entries)

    runtime_process.stop()
    runtime_process.start()
    assert ok(http.get(f"{API}/config")) == expected


def test_worker_registry(http: httpx.Client) -> None:
    """Register (the seed's body: 201, then 200 for the same name), list and detail with live
    active_leases, detail with the worker's leases, delete answering {"removed":true,"id":…};
    with the documented fields and audit entries."""
    first = ok(http.post(f"{API}/workers", json=SEED_WORKER), 201)
    assert set(first) >= WORKER_FIELDS
    assert {k: first[k] for k in WORKER_FIELDS - {"last_heartbeat", "registered_at"}} == {
        "id": "worker-01",
        "node_id": "worker-01",
        "url": "",
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
        "ip_addrs": [],
        "obs_count": 0,
        "db_sha": "",
        "active_leases": 0,
        "agent_version": "unknown",
        "os_info": "",
        "install_method": "manual",
    }
    assert isinstance(first["registered_at"], int)
    assert first["last_heartbeat"] >= first["registered_at"]

    again = ok(http.post(f"{API}/workers", json=SEED_WORKER), 200)
    assert again["registered_at"] == first["registered_at"]
    assert again["last_heartbeat"] >= first["last_heartbeat"]
    assert again["capabilities"] == SEED_WORKER["capabilities"]

    scripted = ok(http.post(f"{API}/workers", json=INSTALL_SCRIPT_WORKER), 201)
    assert scripted["url"] == "http://10.0.0.7:8001"
    assert scripted["capabilities"] == {"claude_cli": True, "max_concurrency": 1, "labels": []}
    # The seed dropped these (REFERENCE_BEHAVIOUR §9.1 item 10); we keep them.
    assert (scripted["agent_version"], scripted["os_info"], scripted["install_method"]) == (
        "0.4.0",
        "Alpine Linux v3.19",
        "script",
    )

    task = ok(http.post(f"{API}/llm-tasks", json=MINIMAL_TASK), 201)
    grant = ok(
        http.post(f"{API}/llm-tasks/{task['id']}/lease", json={"worker_id": "worker-01"}), 201
    )
    lease = grant["lease"]

    listed = {w["id"]: w for w in ok(http.get(f"{API}/workers"))}
    assert set(listed) == {"worker-01", "node-2"}
    assert all(set(w) >= WORKER_FIELDS for w in listed.values())
    assert (listed["worker-01"]["active_leases"], listed["node-2"]["active_leases"]) == (1, 0)

    detail = ok(http.get(f"{API}/workers/worker-01"))
    assert set(detail) >= WORKER_FIELDS | {"leases"}
    assert detail["active_leases"] == 1
    assert [item["id"] for item in detail["leases"]] == [lease["id"]]
    assert set(detail["leases"][0]) >= LEASE_FIELDS
    assert ok(http.get(f"{API}/workers/node-2"))["leases"] == []

    assert ok(http.get(f"{API}/stats"))["workers"] == {"total": 2, "online": 2}

    assert ok(http.delete(f"{API}/workers/worker-01")) == {"removed": True, "id": "worker-01"}
    assert ok(http.get(f"{API}/workers/worker-01"), 404) == {"error": "Worker not found"}
    assert ok(http.delete(f"{API}/workers/worker-01"), 404) == {"error": "Worker not found"}
    assert [w["id"] for w in ok(http.get(f"{API}/workers"))] == ["node-2"]
    # Unlike the seed (leases untouched until they time out), the removed worker's lease ends
    # now and its task goes straight back to the queue.
    ended = ok(http.get(f"{API}/leases"))
    assert [(item["id"], item["status"]) for item in ended] == [(lease["id"], "expired")]
    requeued = ok(http.get(f"{API}/llm-tasks/{task['id']}"))
    assert (requeued["status"], requeued["lease_id"], requeued["worker_id"]) == (
        "queued",
        None,
        None,
    )

    worker_entries = [
        (e["action"], e["entity_type"], e["entity_id"], e["actor"], e["detail"])
        for e in reversed(audit(http))
        if e["entity_type"] == "worker"
    ]
    assert worker_entries == [
        (
            "worker_registered",
            "worker",
            "worker-01",
            "api",
            "Worker worker-01 registered, status=online, max_concurrency=1",
        ),
        (
            "worker_updated",
            "worker",
            "worker-01",
            "api",
            "Worker worker-01 registered, status=online, max_concurrency=1",
        ),
        (
            "worker_registered",
            "worker",
            "node-2",
            "api",
            "Worker node-2 registered, status=online, max_concurrency=1",
        ),
        ("worker_removed", "worker", "worker-01", "admin", "Worker worker-01 unregistered"),
    ]


def test_task_lifecycle_as_the_seed_documents_it(http: httpx.Client) -> None:
    """Create (all documented fields and defaults), list with ?status=, get, lease (201
    {lease, worker}; 503 without workers; 409 when not queued), heartbeat (200 {lease,
    expires_at}), complete with the reference agent's exact bodies (tokens_used: null), requeue,
    leases with ?status=, artifacts with ?task_id=, audit ?limit=10 and stats."""
    minimal = ok(http.post(f"{API}/llm-tasks", json=MINIMAL_TASK), 201)
    assert set(minimal) >= TASK_FIELDS
    assert {k: minimal[k] for k in TASK_FIELDS - {"id", "created_at", "updated_at"}} == {
        **MINIMAL_TASK,
        "context_hints": [],
        "policy": {"timeout_sec": 120, "budget": 0},
        "desired_format": "text",
        "status": "queued",
        "lease_id": None,
        "worker_id": None,
        "attempts": 0,
        "max_attempts": 3,
    }
    assert minimal["created_at"] == minimal["updated_at"]
    full = ok(http.post(f"{API}/llm-tasks", json=FULL_TASK), 201)
    assert {k: full[k] for k in FULL_TASK} == FULL_TASK
    partial = ok(
        http.post(f"{API}/llm-tasks", json=MINIMAL_TASK | {"policy": {"budget": 2.5}}), 201
    )
    assert partial["policy"] == {"timeout_sec": 120, "budget": 2.5}

    listed = ok(http.get(f"{API}/llm-tasks"))
    assert [t["id"] for t in listed] == [partial["id"], full["id"], minimal["id"]]
    assert len(ok(http.get(f"{API}/llm-tasks", params={"status": "queued"}))) == 3
    assert ok(http.get(f"{API}/llm-tasks", params={"status": "running"})) == []
    assert ok(http.get(f"{API}/llm-tasks/{full['id']}")) == full

    no_worker = http.post(f"{API}/llm-tasks/{minimal['id']}/lease")
    assert ok(no_worker, 503) == {"error": "No available worker with free capacity"}

    worker = SEED_WORKER | {"capabilities": {"claude_cli": True, "max_concurrency": 3}}
    ok(http.post(f"{API}/workers", json=worker), 201)

    # lease → heartbeat → complete (success), as the seed's execution path runs it
    grant = ok(http.post(f"{API}/llm-tasks/{minimal['id']}/lease", json={}), 201)
    assert set(grant) >= {"lease", "worker"}
    lease = grant["lease"]
    assert set(lease) >= LEASE_FIELDS
    assert (lease["task_id"], lease["worker_id"], lease["status"]) == (
        minimal["id"],
        "worker-01",
        "active",
    )
    assert (lease["ttl_seconds"], lease["context_id"]) == (300, "ctx-a")
    assert lease["expires_at"] - lease["started_at"] == 300_000
    assert set(grant["worker"]) >= WORKER_FIELDS
    assert (grant["worker"]["id"], grant["worker"]["active_leases"]) == ("worker-01", 1)
    leased = ok(http.get(f"{API}/llm-tasks/{minimal['id']}"))
    assert (leased["status"], leased["attempts"], leased["lease_id"], leased["worker_id"]) == (
        "leased",
        1,
        lease["id"],
        "worker-01",
    )
    again = http.post(f"{API}/llm-tasks/{minimal['id']}/lease")
    assert ok(again, 409) == {"error": "Task status is 'leased', expected 'queued'"}

    beat = http.post(  # the reference agent's heartbeat: an empty body, JSON content type
        f"{API}/llm-tasks/{minimal['id']}/heartbeat",
        content=b"",
        headers={"content-type": "application/json"},
    )
    beat_body = ok(beat)
    assert set(beat_body) >= {"lease", "expires_at"}
    assert beat_body["expires_at"] == beat_body["lease"]["expires_at"]
    assert beat_body["expires_at"] >= lease["expires_at"]
    assert beat_body["lease"]["id"] == lease["id"]
    assert ok(http.get(f"{API}/llm-tasks/{minimal['id']}"))["status"] == "running"

    done = ok(http.post(f"{API}/llm-tasks/{minimal['id']}/complete", json=AGENT_SUCCESS))
    assert set(done) >= {"task", "artifact", "result"}
    assert (done["task"]["id"], done["task"]["status"]) == (minimal["id"], "completed")
    artifact, result = done["artifact"], done["result"]
    assert set(artifact) >= ARTIFACT_FIELDS
    assert {
        k: artifact[k]
        for k in ("task_id", "job_id", "type", "finalized", "entity_refs", "tags", "content")
    } == {
        "task_id": minimal["id"],
        "job_id": None,
        "type": "LLM_RESULT",
        "finalized": True,
        "entity_refs": [],
        "tags": [],
        "content": "Hello from Claude",
    }
    assert set(result) >= RESULT_FIELDS
    assert {k: result[k] for k in RESULT_FIELDS - {"id", "completed_at"}} == {
        "task_id": minimal["id"],
        "worker_id": "worker-01",
        "artifact_id": artifact["id"],
        "status": "success",
        "output": "Hello from Claude",
        "error_message": None,
        "metrics": {"duration_ms": 1234, "tokens_used": None},
    }
    # A repeated callback for the same lease returns the first outcome (the seed answered 409).
    replay = http.post(f"{API}/llm-tasks/{minimal['id']}/complete", json=AGENT_SUCCESS)
    assert ok(replay)["artifact"]["id"] == artifact["id"]
    assert replay.headers["idempotent-replayed"] == "true"

    # lease with a TTL, heartbeat, then the agent's error callback
    grant = ok(http.post(f"{API}/llm-tasks/{full['id']}/lease", json={"ttl_seconds": 600}), 201)
    assert grant["lease"]["expires_at"] - grant["lease"]["started_at"] == 600_000
    assert grant["lease"]["ttl_seconds"] == 600
    ok(http.post(f"{API}/llm-tasks/{full['id']}/heartbeat"))
    failed = ok(http.post(f"{API}/llm-tasks/{full['id']}/complete", json=AGENT_ERROR))
    assert failed["result"]["status"] == "error"
    assert failed["result"]["error_message"] == "Claude CLI returned exit code 1"
    assert failed["result"]["output"] is None
    # Attempts remain, so the task retries after a backoff (the seed stopped at `failed`).
    assert failed["task"]["status"] == "queued"
    assert failed["task"]["attempts"] == 1
    not_queued = http.post(f"{API}/llm-tasks/{full['id']}/requeue")
    assert ok(not_queued, 409) == {"error": "Cannot requeue task with status 'queued'"}

    # a non-retryable error ends in `failed`; requeue resets it with a full budget
    ok(http.post(f"{API}/llm-tasks/{partial['id']}/lease"), 201)
    fatal = AGENT_ERROR | {"error_code": "fatal"}
    assert (
        ok(http.post(f"{API}/llm-tasks/{partial['id']}/complete", json=fatal))["task"]["status"]
        == "failed"
    )
    requeued = ok(http.post(f"{API}/llm-tasks/{partial['id']}/requeue"))
    assert (
        requeued["status"],
        requeued["attempts"],
        requeued["lease_id"],
        requeued["worker_id"],
    ) == (
        "queued",
        0,
        None,
        None,
    )
    assert ok(http.post(f"{API}/llm-tasks/nope/requeue"), 404) == {"error": "Task not found"}

    # one lease still running, for the list filters
    running = ok(http.post(f"{API}/llm-tasks/{partial['id']}/lease"), 201)["lease"]

    leases = ok(http.get(f"{API}/leases"))
    assert len(leases) == 4
    assert all(set(item) >= LEASE_FIELDS for item in leases)
    assert_newest_first(leases, "started_at")
    assert [item["id"] for item in ok(http.get(f"{API}/leases", params={"status": "active"}))] == [
        running["id"]
    ]
    released = ok(http.get(f"{API}/leases", params={"status": "released"}))
    assert {item["task_id"] for item in released} == {minimal["id"], full["id"], partial["id"]}

    artifacts = ok(http.get(f"{API}/artifacts", params={"task_id": minimal["id"]}))
    assert [item["id"] for item in artifacts] == [artifact["id"]]
    assert ok(http.get(f"{API}/artifacts", params={"task_id": full["id"]})) == []
    assert [item["id"] for item in ok(http.get(f"{API}/artifacts"))] == [artifact["id"]]

    recent = ok(http.get(f"{API}/audit", params={"limit": 10}))
    assert len(recent) == 10
    assert all(set(entry) >= AUDIT_FIELDS for entry in recent)
    assert_newest_first(recent, "timestamp")
    entries = audit(http)
    actions = {entry["action"] for entry in entries}
    assert {"task_created", "task_leased", "task_completed", "task_requeued"} <= actions
    leased_entry = next(
        e for e in entries if e["action"] == "task_leased" and e["entity_id"] == lease["id"]
    )
    assert (leased_entry["entity_type"], leased_entry["actor"], leased_entry["detail"]) == (
        "lease",
        "router",
        f"Task {minimal['id']} leased to worker worker-01, TTL 300s",
    )
    requeue_entry = next(e for e in entries if e["action"] == "task_requeued")
    assert (requeue_entry["entity_id"], requeue_entry["actor"], requeue_entry["detail"]) == (
        partial["id"],
        "admin",
        "Requeued from failed",
    )

    assert ok(http.get(f"{API}/stats")) == {
        "tasks": {"total": 3, "by_status": {"completed": 1, "queued": 1, "leased": 1}},
        "leases": {"total": 4, "active": 1},
        "workers": {"total": 1, "online": 1},
    }

    # runs: the 50 newest tasks, newest first
    created = [
        ok(http.post(f"{API}/llm-tasks", json=MINIMAL_TASK | {"prompt": f"p{i}"}), 201)["id"]
        for i in range(50)
    ]
    runs = ok(http.get(f"{API}/runs"))
    assert [t["id"] for t in runs] == created[::-1]
    assert all(set(t) >= TASK_FIELDS for t in runs)


SEED_ENV_MEMBRIDGE = f"http://127.0.0.1:{closed_port()}"  # the seed's env names it; none runs


@pytest.fixture
def seed_env_server(database_url: str, tmp_path: Path) -> Iterator[RuntimeProcess]:
    """A server configured through the seed's /etc/bloom-runtime.env names."""
    process = RuntimeProcess(
        database_url,
        tmp_path,
        NODE_ENV="production",
        MEMBRIDGE_SERVER_URL=SEED_ENV_MEMBRIDGE,
        MEMBRIDGE_ADMIN_KEY="env-admin-key-1234",
        RUNTIME_API_KEY="runtime-api-key-5678",
    )
    process.start()
    yield process
    process.stop()


def test_the_seed_env_file_runs_us_unchanged(seed_env_server: RuntimeProcess) -> None:
    """With the seed's env names: the Membridge URL and (masked) admin key come from the env,
    RUNTIME_API_KEY guards the API (the seed documents the header as X-RUNTIME-API-KEY too)
    while health stays public, and NODE_ENV=production does not 301 plain-HTTP proxies."""
    key = {"X-Runtime-API-Key": "runtime-api-key-5678"}
    with httpx.Client(base_url=seed_env_server.url, timeout=30) as http:
        assert ok(http.get(f"{API}/health"))["status"] == "ok"
        assert ok(http.get(f"{API}/stats"), 401) == {"error": "Unauthorized"}
        assert ok(http.get(f"{API}/stats", headers={"X-Runtime-API-Key": "nope"}), 401) == {
            "error": "Unauthorized"
        }
        raw = http.get(f"{API}/stats", headers={b"X-Runtime-API-Key": b"\xff\xfe-cl\xe9"})
        assert ok(raw, 401) == {"error": "Unauthorized"}
        assert ok(http.get(f"{API}/stats", headers=key)) == FRESH_STATS
        upper = {"X-RUNTIME-API-KEY": "runtime-api-key-5678"}
        assert ok(http.get(f"{API}/stats", headers=upper)) == FRESH_STATS
        assert ok(http.get(f"{API}/config", headers=key)) == {
            "membridge_server_url": SEED_ENV_MEMBRIDGE,
            "admin_key_masked": "env-****1234",
            "connected": False,
            "last_test": None,
        }
        proxied = http.get(f"{API}/stats", headers=key | {"X-Forwarded-Proto": "http"})
        assert ok(proxied) == FRESH_STATS
        assert http.get("/", headers={"X-Forwarded-Proto": "http"}).status_code == 200
