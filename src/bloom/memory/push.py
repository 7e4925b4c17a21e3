"""Push: publish this node's database as the project's snapshot (REFERENCE_BEHAVIOUR.md §5.5,
made safe).

Order: role (fail closed) → snapshot (online backup, checked) → skip if the manifest already
names that digest → lock → the snapshot under its digest (`snapshots/<sha>.db`) → the reference
tool's `claude-mem.db` (a server-side copy) and `.sha256` → leadership checked again → the
manifest, last: that write publishes. A crash anywhere before it leaves the previous manifest in
force and its snapshot in place; the lock is released in every case (or expires by its TTL).
"""

import asyncio
import contextlib
import tempfile
from pathlib import Path

from bloom.domain.memory import (
    ExitCode,
    Manifest,
    PushLock,
    Report,
    Role,
    iso_utc,
    sha256_text,
)
from bloom.memory import sqlite
from bloom.memory.lock import LockHeld
from bloom.memory.node import (
    LeadershipUnknown,
    ManifestUnreadable,
    MemoryNode,
    Standing,
    file_chunks,
)
from bloom.objects.errors import ObjectStoreUnavailable

JSON = "application/json"


async def push(node: MemoryNode) -> Report:
    s = node.settings
    if not node.db.is_file():
        return Report(ExitCode.ERROR, f"local database {node.db} not found")
    try:
        standing = await node.standing()
    except LeadershipUnknown as exc:
        return Report(ExitCode.ERROR, f"role unknown, not pushing: {exc}")
    if standing.role is Role.SECONDARY and not s.allow_secondary_push:
        primary = standing.lease.primary_node_id if standing.lease else "?"
        return Report(
            ExitCode.SECONDARY_BLOCKED_PUSH,
            f"{s.node_id} is secondary for {s.project} (primary: {primary}): push blocked; "
            "promote this node from the control plane, or set ALLOW_SECONDARY_PUSH=1",
            {"role": standing.role.value, "primary_node_id": primary},
        )
    with tempfile.TemporaryDirectory(dir=node.db.parent, prefix=".claude-mem-push-") as tmp:
        snap = Path(tmp) / "snapshot.db"
        try:
            counts = await asyncio.to_thread(sqlite.snapshot, node.db, snap)
            sha = await asyncio.to_thread(sqlite.sha256_of, snap)
            remote = await node.published()
        except ManifestUnreadable:
            remote = None  # a broken manifest is replaced by this push
        except (sqlite.MemoryDbError, ObjectStoreUnavailable) as exc:
            return Report(ExitCode.ERROR, f"push failed: {exc}")
        facts = {"sha256": sha, "observations": counts.observations, "role": standing.role.value}
        if remote is not None and remote.sha256 == sha:
            return Report(ExitCode.OK, "remote already up to date", facts)
        if remote is not None and remote.observations > counts.observations:
            facts["warning"] = (
                f"remote may be ahead: {remote.observations} observations there, "
                f"{counts.observations} here"
            )
        manifest = Manifest(
            project=s.project,
            canonical_id=node.keys.canonical_id,
            timestamp=iso_utc(node.now()),
            source_host=node.hostname,
            db_size=snap.stat().st_size,
            sha256=sha,
            observations=counts.observations,
            session_summaries=counts.session_summaries,
            user_prompts=counts.user_prompts,
            tables=counts.tables,
            epoch=standing.epoch or None,
            snapshot=node.keys.snapshot(sha),
        )
        try:
            await _publish(node, standing, snap, manifest, remote)
        except (LockHeld, ObjectStoreUnavailable, LeadershipUnknown) as exc:
            return Report(ExitCode.ERROR, f"push failed, nothing published: {exc}", facts)
    return Report(ExitCode.OK, f"pushed {sha[:12]} ({counts.observations} observations)", facts)


async def _publish(
    node: MemoryNode, standing: Standing, snap: Path, manifest: Manifest, remote: Manifest | None
) -> None:
    s, keys = node.settings, node.keys
    mine = PushLock(
        hostname=node.hostname,
        timestamp=node.now(),
        project=s.project,
        canonical_id=keys.canonical_id,
        node_id=s.node_id,
        epoch=standing.epoch,
    )
    await node.locks.acquire(
        mine, ttl=s.lock_ttl_seconds, grace=s.stale_lock_grace_seconds, force=s.force_push
    )
    try:
        assert manifest.snapshot is not None
        await node.bucket.put(
            manifest.snapshot, file_chunks(snap), expected_sha256=manifest.sha256, if_absent=True
        )
        await node.bucket.copy(manifest.snapshot, keys.db)
        await node.bucket.put_bytes(keys.sha256, sha256_text(manifest.sha256))
        await _still_entitled(node, standing)
        await node.bucket.put_bytes(keys.manifest, manifest.to_json(), content_type=JSON)
    finally:
        with contextlib.suppress(ObjectStoreUnavailable):  # else it expires by its TTL
            await node.locks.release(mine)
    if remote is not None and remote.snapshot and remote.snapshot != manifest.snapshot:
        with contextlib.suppress(ObjectStoreUnavailable):  # no longer published
            await node.bucket.delete(remote.snapshot)


async def _still_entitled(node: MemoryNode, standing: Standing) -> None:
    """Fencing: the lease must still name this node, at the epoch the push began under."""
    if standing.lease is None or standing.role is not Role.PRIMARY:
        return  # leadership off, or a secondary push the settings allow
    now = (await node.leases.read()).lease
    if now is None or now.epoch != standing.epoch or now.primary_node_id != node.settings.node_id:
        raise LeadershipUnknown("leadership moved during the push")
