"""A task's workspace on this node: one local mirror per repository (fetched, never cloned again
per task), one git worktree per branch, the change committed after the run and pushed with the
node's own git credentials (docs/workspaces.md).

Where an attempt starts: the branch's head as the runtime knows it (`GET /llm-tasks/{id}/
workspace`), so that whatever an attempt that never reported left behind (files, a commit, even a
push) is discarded, and a retried attempt never commits twice. A node that lacks that commit
(the branch's worktree was on a node that is gone, and it was not pushed) rebuilds the branch
from the runtime's patches, which reproduce the same commits (author, committer and dates are
one). With no history yet, the branch starts where the remote has it, else at `ref`, else at
the remote's default branch.

BLOOM's own git commands run no repository hooks and no fsmonitor, sign nothing, speak only
http(s) and ssh, never prompt, and run without the worker's secrets (`clone.command`). Paths
are confined under the work dir: the repository's name and the branch are checked names, and
a path that resolves elsewhere (a link) is refused.
"""

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloom.domain.workspace import (
    MAX_PATCH_CHARS,
    MAX_PUSH_ERROR_CHARS,
    WorkspaceResult,
    WorkspaceSpec,
    commit_subject,
)
from bloom.worker.clone import GitRun, command
from bloom.worker.workspace_gc import touch

NETWORK_TIMEOUT_SEC = 300.0
LOCAL_TIMEOUT_SEC = 120.0
SAFE = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "core.quotePath=false",
    "-c", "advice.detachedHead=false",
)  # fmt: skip
TRAILER = "Bloom-Task"
SHORTSTAT = re.compile(r"(\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?)?")
CREDENTIALS_IN_URL = re.compile(r"(\w+://)[^/@\s]+@")

History = Callable[[bool], Awaitable[Mapping[str, Any]]]
"""The runtime's answer for the task's branch (`with_patches` when true)."""


class WorkspaceFailed(Exception):
    """The workspace could not be made ready or its change kept: the attempt fails (retried)."""


@dataclass(frozen=True, slots=True)
class Author:
    name: str
    email: str


@dataclass(frozen=True, slots=True)
class Prepared:
    """A worktree checked out at `base` on the task's branch."""

    spec: WorkspaceSpec
    mirror: Path
    path: Path
    base: str
    remote_head: str | None
    """The branch's commit on the remote when the attempt began (None: not there)."""


class Workspaces:
    """The mirrors and worktrees under `<work dir>/workspaces`."""

    def __init__(self, root: Path, author: Author):
        self.root = root
        self.author = author

    async def prepare(self, spec: WorkspaceSpec, history: History) -> Prepared:
        mirror = await self._mirror(spec)
        known = await history(False)
        head = known.get("head")
        remote_head = await _commit_of(mirror, f"refs/remotes/origin/{spec.branch}")
        path = self._tree_path(spec)
        touch(self.root, spec.repo, path.name)
        if isinstance(head, str):
            if await _commit_of(mirror, head) != head:
                await self._rebuild(mirror, path, spec, head, await history(True))
                return Prepared(spec, mirror, path, head, remote_head)
            start = head
        else:
            start = remote_head or await self._start_of(mirror, spec)
        await self._check_out(mirror, path, spec.branch, start)
        return Prepared(spec, mirror, path, start, remote_head)

    async def finish(
        self, prepared: Prepared, task_id: str, prompt: str
    ) -> tuple[WorkspaceResult, str | None]:
        """Commit what the run changed (nothing changed: no commit), push it when asked; the
        result and the patch (None when nothing changed or it is too large to send)."""
        path, base = prepared.path, prepared.base
        touch(self.root, prepared.spec.repo, path.name)
        await _git(path, "add", "--all")
        staged = await _run(path, "diff", "--cached", "--quiet")
        if staged.returncode == 0:
            return self._result(prepared, base, (0, 0, 0), None), None
        when = f"@{int(time.time())} +0000"
        env = {
            "GIT_AUTHOR_NAME": self.author.name,
            "GIT_AUTHOR_EMAIL": self.author.email,
            "GIT_AUTHOR_DATE": when,
            "GIT_COMMITTER_NAME": self.author.name,
            "GIT_COMMITTER_EMAIL": self.author.email,
            "GIT_COMMITTER_DATE": when,
        }
        message = f"{commit_subject(prompt)}\n\n{TRAILER}: {task_id}\n"
        await _git(path, "commit", "--quiet", "--no-verify", "-m", message, env=env)
        head = (await _git(path, "rev-parse", "HEAD")).stdout.strip()
        stat = await _git(path, "diff", "--shortstat", base, head)
        patch = (await _git(path, "format-patch", "--stdout", "--binary", f"{base}..{head}")).stdout
        pushed, error = await self._push(prepared, task_id) if prepared.spec.push else (False, None)
        result = self._result(prepared, head, _counts(stat.stdout), error, pushed)
        if len(patch) > MAX_PATCH_CHARS:
            return _omitted(result), None
        return result, patch

    def _result(
        self,
        prepared: Prepared,
        head: str,
        counts: tuple[int, int, int],
        push_error: str | None,
        pushed: bool = False,
    ) -> WorkspaceResult:
        files, insertions, deletions = counts
        return WorkspaceResult(
            base=prepared.base,
            head=head,
            branch=prepared.spec.branch,
            pushed=pushed,
            push_error=push_error,
            files_changed=files,
            insertions=insertions,
            deletions=deletions,
        )

    async def _mirror(self, spec: WorkspaceSpec) -> Path:
        """The repository's mirror, created at first and fetched: its branches as
        `refs/remotes/origin/*` (the local branches are the worktrees')."""
        if spec.repo.startswith("."):
            raise WorkspaceFailed(f"workspace.repo: {spec.repo!r} cannot name a directory")
        mirror = self._confined(self.root / "mirrors" / f"{spec.repo}.git")
        if not (mirror / "HEAD").exists():
            mirror.mkdir(parents=True, exist_ok=True)
            await _git(mirror, "init", "--quiet", "--bare")
            await _git(mirror, "remote", "add", "origin", spec.repo_url)
            await _git(
                mirror, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"
            )
        else:
            await _git(mirror, "remote", "set-url", "origin", spec.repo_url)
        fetched = await _run(
            mirror, "fetch", "--quiet", "--prune", "--tags", "origin", limit_sec=NETWORK_TIMEOUT_SEC
        )
        if fetched.returncode != 0:
            raise WorkspaceFailed(f"git fetch of {spec.repo} failed: {_scrub(fetched.stderr)}")
        return mirror

    async def _start_of(self, mirror: Path, spec: WorkspaceSpec) -> str:
        """Where a new branch starts: `ref` (a remote branch, a tag or a commit), else the
        remote's default branch."""
        if spec.ref is None:
            await _run(
                mirror, "remote", "set-head", "origin", "--auto", limit_sec=NETWORK_TIMEOUT_SEC
            )
            names = ["refs/remotes/origin/HEAD"]
        else:
            names = [f"refs/remotes/origin/{spec.ref}", f"refs/tags/{spec.ref}", spec.ref]
        for name in names:
            if found := await _commit_of(mirror, name):
                return found
        raise WorkspaceFailed(
            f"workspace.ref: {spec.ref!r} is not in {spec.repo}"
            if spec.ref
            else f"{spec.repo} has no default branch to start from"
        )

    async def _check_out(self, mirror: Path, path: Path, branch: str, start: str) -> None:
        """The branch's worktree at `start`, with nothing left of an earlier attempt."""
        if (path / ".git").is_file():
            await _git(path, "checkout", "--quiet", "--force", "-B", branch, start)
            await _git(path, "clean", "-d", "--force", "--quiet")
            return
        await _git(mirror, "worktree", "prune")
        path.parent.mkdir(parents=True, exist_ok=True)
        await _git(mirror, "worktree", "add", "--quiet", "--force", "-B", branch, str(path), start)

    async def _rebuild(
        self, mirror: Path, path: Path, spec: WorkspaceSpec, head: str, known: Mapping[str, Any]
    ) -> None:
        """The branch as its tasks left it, from their patches: the first one's base (which
        the remote has), then each patch in order; refused unless it ends at `head`."""
        steps = list(known.get("steps") or [])
        if not steps or await _commit_of(mirror, str(steps[0].get("base"))) is None:
            raise WorkspaceFailed(
                f"The branch {spec.branch} is at {head}, which neither this node nor the "
                f"remote has, and its patches do not start from a commit the remote has"
            )
        await self._check_out(mirror, path, spec.branch, steps[0]["base"])
        for step in steps:
            patch = step.get("patch")
            if not isinstance(patch, str) or not patch:
                raise WorkspaceFailed(f"The patch of task {step.get('task_id')} is missing")
            env = {"GIT_COMMITTER_NAME": self.author.name, "GIT_COMMITTER_EMAIL": self.author.email}
            applied = await _run(
                path, "am", "--quiet", "--committer-date-is-author-date", "-", stdin=patch, env=env
            )
            if applied.returncode != 0:
                await _run(path, "am", "--abort")
                raise WorkspaceFailed(
                    f"The patch of task {step.get('task_id')} did not apply: {applied.stderr}"
                )
        rebuilt = (await _git(path, "rev-parse", "HEAD")).stdout.strip()
        if rebuilt != head:
            raise WorkspaceFailed(f"The branch rebuilt from patches is at {rebuilt}, not {head}")

    async def _push(self, prepared: Prepared, task_id: str) -> tuple[bool, str | None]:
        """Push the branch. A remote branch that moved on only by this task's own commits (an
        attempt that pushed, then never reported) is replaced; any other is left alone."""
        branch, remote = prepared.spec.branch, prepared.remote_head
        refspec = f"refs/heads/{branch}:refs/heads/{branch}"
        lease: list[str] = []
        if remote and remote != prepared.base and await self._only_ours(prepared, task_id):
            lease = [f"--force-with-lease=refs/heads/{branch}:{remote}"]
        pushed = await _run(
            prepared.mirror,
            "push",
            "--quiet",
            *lease,
            "origin",
            refspec,
            limit_sec=NETWORK_TIMEOUT_SEC,
        )
        if pushed.returncode != 0:
            return False, _scrub(pushed.stderr)[:MAX_PUSH_ERROR_CHARS] or "git push failed"
        return True, None

    async def _only_ours(self, prepared: Prepared, task_id: str) -> bool:
        """Whether the remote's commits past `base` all carry this task's trailer."""
        listed = await _run(
            prepared.mirror,
            "log",
            f"--format=%(trailers:key={TRAILER},valueonly,separator=%x2C)",
            f"{prepared.base}..{prepared.remote_head}",
        )
        values = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
        return listed.returncode == 0 and bool(values) and set(values) == {task_id}

    def _tree_path(self, spec: WorkspaceSpec) -> Path:
        # "~" is in no branch name: a/b and a~b stay apart
        return self._confined(self.root / "trees" / spec.repo / spec.branch.replace("/", "~"))

    def _confined(self, path: Path) -> Path:
        root = self.root.resolve()
        resolved = path.resolve()
        if resolved != root / path.relative_to(self.root) or root not in resolved.parents:
            raise WorkspaceFailed(f"{path} leads outside {root}: refused")
        return resolved


def _counts(shortstat: str) -> tuple[int, int, int]:
    found = SHORTSTAT.search(shortstat)
    if found is None:
        return 0, 0, 0
    return tuple(int(group or 0) for group in found.groups())  # type: ignore[return-value]


def _omitted(result: WorkspaceResult) -> WorkspaceResult:
    fields = result.to_json() | {"patch_omitted": True}
    return WorkspaceResult.from_json(fields)


def _scrub(text: str) -> str:
    """Git's message without credentials a URL might carry."""
    return CREDENTIALS_IN_URL.sub(r"\1***@", text).strip()


async def _commit_of(repo: Path, name: str) -> str | None:
    found = await _run(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
    return found.stdout.strip() or None if found.returncode == 0 else None


async def _git(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    limit_sec: float = LOCAL_TIMEOUT_SEC,
) -> GitRun:
    """`git <args>` in `repo`; WorkspaceFailed when it fails."""
    run = await _run(repo, *args, env=env, limit_sec=limit_sec)
    if run.returncode != 0:
        raise WorkspaceFailed(f"git {args[0]} failed: {_scrub(run.stderr)}")
    return run


async def _run(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    limit_sec: float = LOCAL_TIMEOUT_SEC,
    stdin: str | None = None,
) -> GitRun:
    argv = ["git", *SAFE, "-C", str(repo), *args]
    try:
        return await command(argv, limit_sec, env=env, whole=True, stdin=stdin)
    except TimeoutError:
        raise WorkspaceFailed(f"git {args[0]} timed out after {limit_sec:.0f} s") from None
    except OSError as exc:
        raise WorkspaceFailed(f"git could not be run: {exc}") from None
