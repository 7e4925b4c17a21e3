"""`bloom worker gc` as an operator runs it, on a work dir laid out as a worker leaves it: the
worktree unused past the retention is removed (and unregistered from its mirror), a fresh one
stays, and a link planted among the worktrees is never followed."""

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.git_http import git


def test_gc_removes_what_the_retention_says_and_nothing_else(tmp_path: Path) -> None:
    work = tmp_path / "work"
    root = work / "workspaces"
    seed = tmp_path / "seed"
    git("init", "--quiet", "--initial-branch=main", str(seed))
    (seed / "a.txt").write_text("a\n")
    git("add", "--all", cwd=seed)
    git("commit", "--quiet", "-m", "one", cwd=seed)
    mirror = root / "mirrors" / "demo.git"
    git("clone", "--quiet", "--bare", str(seed), str(mirror))
    old, fresh = root / "trees" / "demo" / "bloom~old", root / "trees" / "demo" / "bloom~new"
    for path, branch in ((old, "bloom/old"), (fresh, "bloom/new")):
        git("-C", str(mirror), "worktree", "add", "--quiet", "-b", branch, str(path), "main")
        stamp = root / "used" / "demo" / path.name
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    two_days_ago = time.time() - 48 * 3600
    os.utime(root / "used" / "demo" / old.name, (two_days_ago, two_days_ago))
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    os.utime(outside, (two_days_ago, two_days_ago))
    (root / "trees" / "demo" / "bloom~link").symlink_to(outside)

    done = gc(work)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(old.resolve())]
    assert "1 worktree removed" in done.stderr
    assert not old.exists()
    assert (fresh / "a.txt").exists()
    assert (outside / "keep.txt").exists()
    listed = git("-C", str(mirror), "worktree", "list")
    assert str(old) not in listed
    assert str(fresh) in listed
    # the branch's commits stay in the mirror
    assert git("-C", str(mirror), "rev-parse", "bloom/old").strip()
    again = gc(work)  # nothing left to remove: still a clean exit
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    assert "0 worktrees removed" in again.stderr


def gc(work: Path) -> subprocess.CompletedProcess[str]:
    """`bloom worker gc` as an operator (or a cron job) runs it."""
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "worker", "gc", "--work-dir", str(work),
         "--name", "w1"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "BLOOM_WORKER_WORKSPACE_MIN_FREE_MB": "0"},
    )  # fmt: skip
