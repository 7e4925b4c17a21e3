"""The seed's task lifecycle on a real server, field by field, as the seed documents it."""

from typing import Any

import httpx

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

FULL_TASK = {
    "context_id": "ctx-b",
    "agent_slug": "architect",
    "prompt": "Summarise the design",
    "context_hints": ["docs/DESIGN.md", "@memory/recent"],
    "policy": {"timeout_sec": 600, "budget": 20000},
    "desired_format": "json",
    "max_attempts": 5,
}


def assert_newest_first(entries: list[dict[str, Any]], key: str) -> None:
    stamps = [entry[key] for entry in entries]
    assert stamps == sorted(stamps, reverse=True)


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
