"""The seed's contract on a real server: the curls of a fresh server, the configuration, the worker
registry, and the seed's env file run unchanged."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom import __version__
from tests.process.seed_contract.contract import (
    API,
    AUDIT_FIELDS,
    LEASE_FIELDS,
    MINIMAL_TASK,
    SEED_WORKER,
    WORKER_FIELDS,
    audit,
    ok,
)
from tests.support.net import closed_port
from tests.support.server import RuntimeProcess

FRESH_STATS = {
    "tasks": {"total": 0, "by_status": {}},
    "leases": {"total": 0, "active": 0},
    "workers": {"total": 0, "online": 0},
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
        # unlike the seed, registering again without a change is presence, not an audit event
        (
            "worker_registered",
            "worker",
            "node-2",
            "api",
            "Worker node-2 registered, status=online, max_concurrency=1",
        ),
        (
            "worker_url_set",
            "worker",
            "node-2",
            "api",
            "Agent URL of worker node-2 set to http://10.0.0.7:8001 (was: none)",
        ),
        ("worker_removed", "worker", "worker-01", "admin", "Worker worker-01 unregistered"),
    ]


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
        page = http.get("/", headers={"X-Forwarded-Proto": "http"})  # no redirect to https:
        assert (page.status_code, page.headers["location"]) == (303, "/login?next=%2F")  # login
