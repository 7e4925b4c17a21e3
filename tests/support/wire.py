"""The runtime's replies as the clients read them, for tests without a server: whole tasks and
grants (the parsers want every field the seed's runtime sends)."""

from typing import Any

from bloom.clients.wire import Grant, TaskInfo


def task_json(status: str = "queued", **fields: Any) -> dict[str, Any]:
    """A task's JSON as the runtime sends it; `fields` override."""
    return {
        "id": "t1",
        "context_id": "c",
        "agent_slug": "default",
        "prompt": "hi",
        "context_hints": [],
        "policy": {"timeout_sec": 120, "budget": 0},
        "desired_format": "text",
        "status": status,
        "created_at": 1_000,
        "updated_at": 1_000,
        "lease_id": None,
        "worker_id": None,
        "attempts": 0,
        "max_attempts": 3,
    } | fields


def task(status: str = "queued", **fields: Any) -> TaskInfo:
    return TaskInfo.from_json(task_json(status, **fields))


def lease_json(task_id: str = "t1", lease_id: str = "l1", worker_id: str = "w1") -> dict[str, Any]:
    """An active lease's JSON as the runtime sends it."""
    return {
        "id": lease_id,
        "task_id": task_id,
        "worker_id": worker_id,
        "status": "active",
        "started_at": 1_000,
        "expires_at": 301_000,
        "ttl_seconds": 300,
        "last_heartbeat": 1_000,
        "context_id": "c",
    }


def grant(
    task_id: str = "t1", lease_id: str = "l1", worker_id: str = "w1", **task_fields: Any
) -> Grant:
    lease = lease_json(task_id, lease_id, worker_id)
    fields = {"lease_id": lease_id, "worker_id": worker_id, "attempts": 1} | task_fields
    return Grant.from_json({"lease": lease, "task": task_json("leased", id=task_id, **fields)})


def grant_json(
    task_id: str = "t1", lease_id: str = "l1", worker_id: str = "w1", **task_fields: Any
) -> dict[str, Any]:
    """A claim's answer as the runtime sends it: {lease, task}."""
    lease = lease_json(task_id, lease_id, worker_id)
    fields = {"lease_id": lease_id, "worker_id": worker_id, "attempts": 1} | task_fields
    return {"lease": lease, "task": task_json("leased", id=task_id, **fields)}


def complete_reply(task_id: str = "t1", **extra: Any) -> dict[str, Any]:
    """A complete's answer as the runtime sends it (`extra`: `next`, `next_error`)."""
    result = {"id": "r1", "task_id": task_id, "status": "success", "artifact_id": None}
    return {"task": task_json("completed", id=task_id), "artifact": None, "result": result} | extra
