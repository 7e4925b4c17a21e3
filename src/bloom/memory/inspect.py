"""What a node can tell about a project's memory without changing it: `status` (role, local and
published digests and counts, who is behind), `doctor` (every prerequisite checked, the store's
conditional writes included), and `leadership` (the lease, settled: the one command here that
may write it, as the reference's `leadership_info` does)."""

import asyncio
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bloom.domain.memory import ExitCode, Lease, Report
from bloom.memory import sqlite
from bloom.memory.leadership import LeadershipUnknown
from bloom.memory.node import ManifestUnreadable, MemoryNode
from bloom.objects.errors import ObjectStoreUnavailable, PreconditionFailed

HOOKS = {"SessionStart": "pull", "Stop": "push"}
"""The Claude Code hooks of automatic sync: the event, and what its command must run."""


async def local_state(node: MemoryNode) -> dict[str, Any]:
    """The local database's content digest (as a push would publish it) and counts."""
    if not node.db.is_file():
        return {"exists": False}
    with tempfile.TemporaryDirectory(dir=node.db.parent, prefix=".claude-mem-status-") as tmp:
        snap = Path(tmp) / "status.db"
        counts = await asyncio.to_thread(sqlite.snapshot, node.db, snap)
        sha = await asyncio.to_thread(sqlite.sha256_of, snap)
    return {"exists": True, "sha256": sha, **asdict(counts)}


def _lease_facts(lease: Lease | None, node_id: str, now: int) -> dict[str, Any]:
    if lease is None:
        return {"role": "unknown", "lease": None}
    valid = lease.valid_at(now)
    return {
        "role": lease.role_of(node_id).value if valid else "unknown",
        "lease": {
            "primary_node_id": lease.primary_node_id,
            "epoch": lease.epoch,
            "expires_at": lease.expires_at,
            "valid": valid,
        },
    }


async def status(node: MemoryNode) -> Report:
    s = node.settings
    facts: dict[str, Any] = {
        "project": s.project,
        "canonical_id": node.keys.canonical_id,
        "node_id": s.node_id,
        "db_path": str(node.db),
    }
    try:
        facts |= _lease_facts((await node.leases.read()).lease, s.node_id, node.now())
        remote = await node.published()
        facts["local"] = await local_state(node)
    except (LeadershipUnknown, ObjectStoreUnavailable, ManifestUnreadable) as exc:
        return Report(ExitCode.ERROR, f"status unknown: {exc}", facts)
    except sqlite.MemoryDbError as exc:
        return Report(ExitCode.ERROR, f"local database unreadable: {exc}", facts)
    local = facts["local"]
    facts["remote"] = (
        None
        if remote is None
        else {
            "sha256": remote.sha256,
            "observations": remote.observations,
            "timestamp": remote.timestamp,
            "source_host": remote.source_host,
        }
    )
    in_sync = remote is not None and local.get("sha256") == remote.sha256
    facts["in_sync"] = in_sync
    facts["local_ahead"] = bool(remote and local.get("observations", 0) > remote.observations)
    if remote is None:
        detail = "nothing published yet"
    elif in_sync:
        detail = "in sync with the published snapshot"
    else:
        detail = "differs from the published snapshot"
    return Report(ExitCode.OK, f"{s.project} on {s.node_id} ({facts['role']}): {detail}", facts)


async def leadership(node: MemoryNode) -> Report:
    s = node.settings
    try:
        standing = await node.standing()
    except LeadershipUnknown as exc:
        return Report(ExitCode.ERROR, f"leadership unknown: {exc}")
    facts = _lease_facts(standing.lease, s.node_id, node.now())
    facts["role"] = standing.role.value
    primary = standing.lease.primary_node_id if standing.lease else "(leadership disabled)"
    return Report(ExitCode.OK, f"{s.node_id} is {standing.role.value}; primary: {primary}", facts)


async def doctor(node: MemoryNode, claude_settings: Path) -> Report:
    """Every check, each `ok`, `warn` or `error`; the exit code is 1 only on an error."""
    checks: dict[str, tuple[str, str]] = {}
    try:
        await node.bucket.ensure_bucket()
        remote = await node.published()
        checks["bucket"] = ("ok", f"{node.settings.s3_bucket} at {node.bucket.endpoint}")
        checks["published"] = (
            ("ok", f"{remote.sha256[:12]}, {remote.observations} observations, {remote.timestamp}")
            if remote
            else ("warn", "nothing published yet")
        )
        checks["conditional_writes"] = await _conditional_writes(node)
        lease = (await node.leases.read()).lease
        facts = _lease_facts(lease, node.settings.node_id, node.now())
        checks["leadership"] = (
            ("ok", f"{facts['role']}, primary {lease.primary_node_id}, epoch {lease.epoch}")
            if lease and lease.valid_at(node.now())
            else ("warn", "no valid lease: the next push, pull or leadership command settles it")
        )
        lock, _ = await node.locks.read()
        checks["lock"] = ("ok", "free") if lock is None else ("warn", f"held by {lock.holder()}")
    except (ObjectStoreUnavailable, ManifestUnreadable, LeadershipUnknown) as exc:
        checks["bucket" if "bucket" not in checks else "store"] = ("error", str(exc))
    try:
        local = await local_state(node)
        checks["local_db"] = (
            ("ok", f"{node.db}: integrity ok, {local['observations']} observations")
            if local["exists"]
            else ("warn", f"{node.db} not found (a pull creates it)")
        )
    except sqlite.MemoryDbError as exc:
        checks["local_db"] = ("error", str(exc))
    checks["hooks"] = _hooks(claude_settings)
    worst = {verdict for verdict, _ in checks.values()}
    overall = "ERROR" if "error" in worst else "DEGRADED" if "warn" in worst else "OK"
    code = ExitCode.ERROR if overall == "ERROR" else ExitCode.OK
    return Report(code, overall, {name: list(check) for name, check in checks.items()})


async def _conditional_writes(node: MemoryNode) -> tuple[str, str]:
    """Probe: a second If-None-Match create must be refused, or the lease is not safe here."""
    key = f"{node.keys.prefix}/doctor/{node.settings.node_id}.probe"
    try:
        await node.bucket.delete(key)
        await node.bucket.swap(key, b"1", etag=None)
        try:
            await node.bucket.swap(key, b"2", etag=None)
        except PreconditionFailed:
            return "ok", "If-None-Match honoured"
        return "error", "the store ignores If-None-Match: two primaries are possible"
    finally:
        await node.bucket.delete(key)


def _hooks(claude_settings: Path) -> tuple[str, str]:
    """Whether Claude Code runs pull at session start and push at stop (ours or the
    reference's hook scripts)."""
    try:
        hooks = json.loads(claude_settings.read_text()).get("hooks", {})
    except (OSError, ValueError, AttributeError):
        return "warn", f"{claude_settings}: no hooks (automatic mode or manual sync only)"
    missing = []
    for event, action in HOOKS.items():
        commands = json.dumps(hooks.get(event, []))
        if f"memory {action}" not in commands and f"hook-{action}" not in commands:
            missing.append(f"{event} ({action})")
    if missing:
        return "warn", f"{claude_settings}: no hook for {', '.join(missing)}"
    return "ok", "SessionStart pulls, Stop pushes"
