"""The node's workspace against real git and a remote served over smart HTTP, without the rest
of the system: BLOOM's own git runs no hook and no fsmonitor the repository (or a run) planted,
a path led elsewhere by a link is refused, an attempt's leftovers are discarded, and a push
replaces the remote branch only when it moved on by this same task's own orphaned commits."""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bloom.domain.workspace import WorkspaceSpec
from bloom.worker.workspace import Author, Prepared, WorkspaceFailed, Workspaces
from tests.support.git_http import GitServer, git

AUTHOR = Author("Node", "node@example.com")


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[GitServer]:
    with GitServer(tmp_path / "served") as server:
        yield server


@pytest.fixture
def spec(origin: GitServer, tmp_path: Path) -> WorkspaceSpec:
    url = origin.create("demo", {"README.md": "# demo\n"}, tmp_path / "seed")
    return WorkspaceSpec("demo", url, "bloom/c1")


def history(head: str | None) -> Any:
    async def known(patches: bool) -> Mapping[str, Any]:
        return {"head": head, "steps": []}

    return known


async def test_no_planted_hook_or_fsmonitor_runs_in_blooms_own_git(
    spec: WorkspaceSpec, tmp_path: Path
) -> None:
    spaces = Workspaces(tmp_path / "work" / "workspaces", AUTHOR)
    prepared = await spaces.prepare(spec, history(None))
    proof = tmp_path / "ran"
    script = f"#!/bin/sh\ntouch {proof}\n"
    common = Path(git("rev-parse", "--git-common-dir", cwd=prepared.path).strip())
    hooks = (prepared.path / common if not common.is_absolute() else common) / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("pre-commit", "commit-msg", "post-commit", "pre-push", "reference-transaction"):
        (hooks / name).write_text(script)
        (hooks / name).chmod(0o755)
    monitor = tmp_path / "monitor.sh"
    monitor.write_text(script)
    monitor.chmod(0o755)
    git("config", "core.fsmonitor", str(monitor), cwd=prepared.path)
    (prepared.path / "new.txt").write_text("new\n")

    result, patch = await spaces.finish(prepared, "task-1", "add new")

    assert result.changed
    assert result.pushed, result.push_error
    assert patch is not None
    assert "+new" in patch
    assert not proof.exists(), "a repository hook or fsmonitor ran"


async def test_a_link_that_leads_out_of_the_work_dir_is_refused(
    spec: WorkspaceSpec, tmp_path: Path
) -> None:
    root = tmp_path / "work" / "workspaces"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "trees").mkdir(parents=True)
    (root / "trees" / "demo").symlink_to(elsewhere)
    with pytest.raises(WorkspaceFailed, match="leads outside"):
        await Workspaces(root, AUTHOR).prepare(spec, history(None))
    assert list(elsewhere.iterdir()) == []


async def test_an_attempts_leftovers_are_discarded_by_the_next(
    spec: WorkspaceSpec, tmp_path: Path
) -> None:
    spaces = Workspaces(tmp_path / "work" / "workspaces", AUTHOR)
    first = await spaces.prepare(spec, history(None))
    (first.path / "half.txt").write_text("an attempt that never reported\n")
    git("add", "half.txt", cwd=first.path)
    git("commit", "--quiet", "-m", "orphan", cwd=first.path)
    again = await spaces.prepare(spec, history(first.base))
    assert again.base == first.base
    assert not (again.path / "half.txt").exists()
    assert git("rev-parse", "HEAD", cwd=again.path).strip() == first.base


async def orphan_pushed(spaces: Workspaces, prepared: Prepared, task_id: str) -> str:
    """What an attempt that pushed, then died before it reported, leaves on the remote."""
    (prepared.path / "orphan.txt").write_text("orphan\n")
    result, _ = await spaces.finish(prepared, task_id, "orphan run")
    assert result.pushed, result.push_error
    return result.head


async def test_a_retry_replaces_its_own_orphaned_push_and_nothing_else(
    origin: GitServer, spec: WorkspaceSpec, tmp_path: Path
) -> None:
    spaces = Workspaces(tmp_path / "work" / "workspaces", AUTHOR)
    first = await spaces.prepare(spec, history(None))
    orphan = await orphan_pushed(spaces, first, "task-7")
    assert origin.head("demo", spec.branch) == orphan

    # the retry of task-7 starts where the runtime knows the branch (its base), and wins
    retry = await spaces.prepare(spec, history(first.base))
    (retry.path / "retry.txt").write_text("retry\n")
    result, _ = await spaces.finish(retry, "task-7", "the retry")
    assert result.pushed, result.push_error
    assert origin.head("demo", spec.branch) == result.head
    assert result.head != orphan

    # someone else's commit on the remote branch is never overwritten
    other = tmp_path / "other"
    git("clone", "--quiet", "--branch", spec.branch, spec.repo_url, str(other))
    (other / "theirs.txt").write_text("theirs\n")
    git("add", "theirs.txt", cwd=other)
    git("commit", "--quiet", "-m", "a person's commit", cwd=other)
    git("push", "--quiet", "origin", spec.branch, cwd=other)
    theirs = origin.head("demo", spec.branch)
    later = await spaces.prepare(spec, history(result.head))
    (later.path / "later.txt").write_text("later\n")
    refused, patch = await spaces.finish(later, "task-8", "a later task")
    assert not refused.pushed
    assert refused.push_error
    assert patch is not None
    assert origin.head("demo", spec.branch) == theirs
