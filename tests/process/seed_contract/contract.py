"""The seed's field sets and bodies, and small helpers for calling a real runtime."""

from typing import Any

import httpx

API = "/api/runtime"

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

AUDIT_FIELDS = {"id", "timestamp", "action", "entity_type", "entity_id", "actor", "detail"}

# The seed's worker registration (RUNTIME_GAPS_AND_NEXT_STEPS, GAP-4).
SEED_WORKER = {
    "name": "worker-01",
    "status": "online",
    "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
}

MINIMAL_TASK = {"context_id": "ctx-a", "agent_slug": "writer", "prompt": "Say hello"}


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.request.url, response.text)
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def audit(http: httpx.Client, limit: int = 1000) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = ok(http.get(f"{API}/audit", params={"limit": limit}))
    return entries
