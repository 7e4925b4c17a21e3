"""Pull: make this node's database the published snapshot (REFERENCE_BEHAVIOUR.md §5.6, made
safe).

The manifest in force says which snapshot and which digest; the snapshot is downloaded to a
temporary file beside the database and must hash to that digest and pass the integrity check
before anything local changes. A primary whose database differs refuses (unless overridden);
the local content is backed up (with retention), then replaced in one SQLite transaction. Any
failure before that leaves the local database as it was.
"""

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bloom.domain.memory import (
    Backup,
    ExitCode,
    Manifest,
    Report,
    Role,
    expired_backups,
    iso_utc,
)
from bloom.memory import sqlite
from bloom.memory.node import LeadershipUnknown, ManifestUnreadable, MemoryNode
from bloom.objects.errors import ObjectMissing, ObjectStoreUnavailable


async def pull(node: MemoryNode) -> Report:
    s = node.settings
    try:
        remote = await node.published()
    except (ObjectStoreUnavailable, ManifestUnreadable) as exc:
        return Report(ExitCode.ERROR, f"pull failed: {exc}")
    if remote is None:
        return Report(ExitCode.ERROR, f"nothing published yet for {s.project}")
    node.db.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=node.db.parent, prefix=".claude-mem-pull-") as tmp:
        local_snap, incoming = Path(tmp) / "local.db", Path(tmp) / "incoming.db"
        facts: dict[str, object] = {"sha256": remote.sha256, "observations": remote.observations}
        local_sha: str | None = None
        local_obs = 0
        if node.db.is_file():
            try:
                local_obs = (
                    await asyncio.to_thread(sqlite.snapshot, node.db, local_snap)
                ).observations
                local_sha = await asyncio.to_thread(sqlite.sha256_of, local_snap)
            except sqlite.MemoryDbError as exc:
                return Report(ExitCode.ERROR, f"pull refused, local database unreadable: {exc}")
            if local_sha == remote.sha256:
                return Report(ExitCode.OK, "local database already up to date", facts)
            refused = await _primary_refusal(node)
            if refused is not None:
                return refused
            facts["local_ahead"] = local_obs > remote.observations
        try:
            await node.download(remote.snapshot or node.keys.db, incoming)
            got = await asyncio.to_thread(sqlite.sha256_of, incoming)
            if got != remote.sha256:
                return Report(
                    ExitCode.ERROR,
                    f"downloaded snapshot hashes to {got[:12]}, the manifest says "
                    f"{remote.sha256[:12]} (a push in progress?): local database unchanged",
                    facts,
                )
            await asyncio.to_thread(sqlite.check, incoming)
        except (ObjectStoreUnavailable, ObjectMissing, sqlite.MemoryDbError, OSError) as exc:
            return Report(ExitCode.ERROR, f"pull failed, local database unchanged: {exc}", facts)
        if local_sha is not None:
            backup = await asyncio.to_thread(
                _back_up, node, local_snap, remote, local_sha, local_obs, facts
            )
            facts["backup"] = str(backup)
            try:
                await asyncio.to_thread(sqlite.restore, incoming, node.db)
            except sqlite.MemoryDbError as exc:
                return Report(ExitCode.ERROR, f"restore failed (rolled back): {exc}", facts)
            await asyncio.to_thread(_prune_backups, node)
        else:
            os.replace(incoming, node.db)
    detail = f"pulled {remote.sha256[:12]} ({remote.observations} observations)"
    if facts.get("local_ahead"):
        detail += f"; local was ahead ({local_obs} observations), kept in the backup"
    return Report(ExitCode.OK, detail, facts)


async def _primary_refusal(node: MemoryNode) -> Report | None:
    """A primary with local changes does not pull unless told to; an unknown role refuses."""
    s = node.settings
    try:
        standing = await node.standing()
    except LeadershipUnknown as exc:
        return Report(ExitCode.ERROR, f"role unknown, not pulling: {exc}")
    if standing.role is Role.PRIMARY and not s.allow_primary_pull_override:
        return Report(
            ExitCode.PRIMARY_REFUSED_PULL,
            f"{s.node_id} is the primary for {s.project} and its database differs from the "
            "published one: pull refused (push instead, or ALLOW_PRIMARY_PULL_OVERRIDE=1)",
            {"role": standing.role.value},
        )
    return None


def _back_up(
    node: MemoryNode,
    local_snap: Path,
    remote: Manifest,
    local_sha: str,
    local_obs: int,
    facts: dict[str, object],
) -> Path:
    """The local content (its snapshot) and the vector store, with a note, before replacing."""
    where = node.settings.backup_dir / time.strftime("%Y%m%d-%H%M%S", time.gmtime(node.now()))
    where = _fresh(where)
    where.mkdir(parents=True)
    shutil.copy2(local_snap, where / node.db.name)
    chroma = node.db.parent / "vector-db" / "chroma.sqlite3"
    if chroma.is_file():
        shutil.copy2(chroma, where / chroma.name)
    note = {
        "timestamp": iso_utc(node.now()),
        "hostname": node.hostname,
        "reason": "pull-overwrite safety backup",
        "local_sha": local_sha,
        "remote_sha": remote.sha256,
        "local_obs": local_obs,
        "remote_obs": remote.observations,
        "local_ahead": bool(facts.get("local_ahead")),
        "db_path": str(node.db),
    }
    (where / "manifest.json").write_text(json.dumps(note, indent=2))
    return where


def _fresh(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`… when two pulls fall in one second."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _prune_backups(node: MemoryNode) -> None:
    s = node.settings
    found = [Backup(p.name, p.stat().st_mtime) for p in s.backup_dir.iterdir() if p.is_dir()]
    for name in expired_backups(
        found, now=node.now(), max_days=s.backup_max_days, max_count=s.backup_max_count
    ):
        shutil.rmtree(s.backup_dir / name, ignore_errors=True)
