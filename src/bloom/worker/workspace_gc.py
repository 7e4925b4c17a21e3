"""Disk for workspaces, bounded: worktrees not used for the retention (24 h by default) are
removed, and, while free space is short, the least recently used ones first, never one used
within the longest a task may run (one still in use). The worker does it at start and every
hour; `bloom worker gc` does it now.

A worktree's last use is its stamp (`<workspaces>/used/<repo>/<branch>`, touched when an
attempt prepares it and when it keeps its change), kept beside it rather than in it so that no
run commits it. Removing a worktree loses nothing the runtime does not have: the branch's
commits stay in the mirror, and were pushed or kept as patches.
"""

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bloom.worker.clone import command

RETENTION_SEC = 24 * 3600
IN_USE_SEC = 2 * 3600
"""Never removed when used more recently than this: longer than any attempt may run (1 h)."""
MIN_FREE_BYTES = 1024**3
GIT_TIMEOUT_SEC = 120.0


@dataclass(frozen=True, slots=True)
class Tree:
    path: Path
    mirror: Path
    stamp: Path
    used_at: float


def stamp_path(root: Path, repo: str, tree_name: str) -> Path:
    return root / "used" / repo / tree_name


def touch(root: Path, repo: str, tree_name: str) -> None:
    stamp = stamp_path(root, repo, tree_name)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


def trees(root: Path) -> list[Tree]:
    """Every worktree under `root`, least recently used first (never stamped: its own time)."""
    found = []
    for repo_dir in sorted((root / "trees").glob("*")):
        if repo_dir.is_symlink():  # never followed out of the work dir
            continue
        mirror = root / "mirrors" / f"{repo_dir.name}.git"
        for path in sorted(repo_dir.glob("*")):
            if path.is_symlink() or not path.is_dir():
                continue
            stamp = stamp_path(root, repo_dir.name, path.name)
            with contextlib.suppress(OSError):
                used = stamp.stat().st_mtime if stamp.exists() else path.stat().st_mtime
                found.append(Tree(path, mirror, stamp, used))
    return sorted(found, key=lambda tree: tree.used_at)


def to_remove(
    found: list[Tree],
    now: float,
    *,
    retention_sec: float,
    free_bytes: int,
    min_free_bytes: int,
    size_of: Callable[[Path], int],
) -> list[Tree]:
    """Those past the retention, then, while free space stays short, the least recently used
    of the others; none used within `IN_USE_SEC` (pure: sizes and free space given)."""
    chosen = [tree for tree in found if now - tree.used_at > retention_sec]
    freed = sum(size_of(tree.path) for tree in chosen)
    for tree in found:
        if free_bytes + freed >= min_free_bytes:
            break
        if tree in chosen or now - tree.used_at <= IN_USE_SEC:
            continue
        chosen.append(tree)
        freed += size_of(tree.path)
    return chosen


async def collect(
    root: Path,
    now: float,
    retention_sec: float = RETENTION_SEC,
    min_free_bytes: int = MIN_FREE_BYTES,
) -> list[Path]:
    """Remove what `to_remove` chooses; the paths removed."""
    if not (root / "trees").is_dir():
        return []
    found = trees(root)
    chosen = to_remove(
        found,
        now,
        retention_sec=retention_sec,
        free_bytes=shutil.disk_usage(root).free,
        min_free_bytes=min_free_bytes,
        size_of=_size,
    )
    removed = []
    for tree in chosen:
        git = ["git", "-c", "core.hooksPath=/dev/null", "-C", str(tree.mirror), "worktree"]
        registered = tree.mirror.is_dir()
        if registered:
            await command([*git, "remove", "--force", str(tree.path)], GIT_TIMEOUT_SEC)
        if tree.path.exists():  # not a registered worktree (or its mirror is gone)
            shutil.rmtree(tree.path, ignore_errors=True)
        if registered:
            await command([*git, "prune"], GIT_TIMEOUT_SEC)
        tree.stamp.unlink(missing_ok=True)
        removed.append(tree.path)
    return removed


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
