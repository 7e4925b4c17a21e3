"""A task's workspace: the repository it changes, where it starts, the branch it writes, and
what an attempt made of it (pure; docs/workspaces.md).

A task names a managed project (`repo`); the runtime stores the request with the project's
repository URL, so that the worker needs nothing else. One branch of one repository is written by
one task at a time: its `key` is what the claim compares.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloom.domain.branch import PLAIN_BRANCH, is_plain_branch

REPO_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""A managed project's name (as `/clone` takes it)."""
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
"""A full commit id (SHA-1, or SHA-256 for repositories that use it)."""
SHORT_COMMIT = re.compile(r"[0-9a-f]{7,64}")
BRANCH_PREFIX = "bloom/"
UNSAFE_IN_BRANCH = re.compile(r"[^A-Za-z0-9._-]+")
MAX_BRANCH_CHARS = 200
MAX_PATCH_CHARS = 4 * 1024 * 1024
"""A patch must fit the complete's request body (5 MiB by default) as JSON text; a larger one is
left out of the result (`patch_omitted`), while the branch holds the change."""
MAX_PUSH_ERROR_CHARS = 2000
PATCH_ARTIFACT = "patch"
"""The type of the artifact that holds an attempt's change."""


class WorkspaceProblem(ValueError):
    """A workspace request or result that cannot be taken; the message names the field."""


def default_branch(context_id: str) -> str:
    """`bloom/<context id>`, the context id made a plain branch name part."""
    part = UNSAFE_IN_BRANCH.sub("-", context_id).strip(".-") or "context"
    part = re.sub(r"\.{2,}", ".", part)
    if part.endswith(".lock"):
        part = part[: -len(".lock")] + "-lock"
    return (BRANCH_PREFIX + part)[:MAX_BRANCH_CHARS].rstrip(".-")


def ref_problem(ref: str) -> str | None:
    """Why `ref` (a branch, tag or commit to start from) is refused, or None."""
    if SHORT_COMMIT.fullmatch(ref) or is_plain_branch(ref):
        return None
    return f"workspace.ref: a commit id (7 to 64 hex digits) or {PLAIN_BRANCH}"


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    """What a task asks for, as the task keeps it (and a worker receives it)."""

    repo: str
    repo_url: str
    branch: str
    ref: str | None = None
    push: bool = True

    @property
    def key(self) -> str:
        """One branch of one repository: never written by two tasks at a time."""
        return workspace_key(self.repo, self.branch)

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "repo_url": self.repo_url,
            "ref": self.ref,
            "branch": self.branch,
            "push": self.push,
        }

    @classmethod
    def from_json(cls, data: Any) -> "WorkspaceSpec":
        """The stored form; WorkspaceProblem when it is not one."""
        if not isinstance(data, dict):
            raise WorkspaceProblem("workspace: an object")
        repo, url, branch = data.get("repo"), data.get("repo_url"), data.get("branch")
        ref, push = data.get("ref"), data.get("push", True)
        if not isinstance(repo, str) or not REPO_NAME.fullmatch(repo):
            raise WorkspaceProblem("workspace.repo: a managed project's name")
        if not isinstance(url, str) or not url:
            raise WorkspaceProblem("workspace.repo_url: the repository's URL")
        if not isinstance(branch, str) or not is_plain_branch(branch):
            raise WorkspaceProblem(f"workspace.branch: {PLAIN_BRANCH}")
        if ref is not None and (not isinstance(ref, str) or ref_problem(ref)):
            raise WorkspaceProblem(ref_problem(str(ref)) or "workspace.ref")
        if not isinstance(push, bool):
            raise WorkspaceProblem("workspace.push: true or false")
        return cls(repo, url, branch, ref, push)


def workspace_key(repo: str, branch: str) -> str:
    return f"{repo}\n{branch}"


def key_of(workspace: dict[str, Any] | None) -> str | None:
    """The stored workspace's key (None: the task has no workspace)."""
    if not workspace:
        return None
    return workspace_key(str(workspace["repo"]), str(workspace["branch"]))


@dataclass(frozen=True, slots=True)
class WorkspaceResult:
    """What one attempt did to its branch: `base` the commit it started from, `head` where the
    branch is now (`base` when nothing changed: no commit is made), the diff's size, and whether
    the branch reached the repository's remote."""

    base: str
    head: str
    branch: str
    pushed: bool
    push_error: str | None
    files_changed: int
    insertions: int
    deletions: int
    patch_omitted: bool = False

    @property
    def changed(self) -> bool:
        return self.head != self.base

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "head": self.head,
            "branch": self.branch,
            "pushed": self.pushed,
            "push_error": self.push_error,
            "files_changed": self.files_changed,
            "insertions": self.insertions,
            "deletions": self.deletions,
            "patch_omitted": self.patch_omitted,
        }

    @classmethod
    def from_json(cls, data: Any) -> "WorkspaceResult":
        """A complete's `workspace`; WorkspaceProblem naming the field that is wrong."""
        if not isinstance(data, dict):
            raise WorkspaceProblem("workspace: an object")
        for name in ("base", "head"):
            if not isinstance(data.get(name), str) or not COMMIT.fullmatch(data[name]):
                raise WorkspaceProblem(f"workspace.{name}: a full commit id")
        if not isinstance(data.get("branch"), str) or not is_plain_branch(data["branch"]):
            raise WorkspaceProblem(f"workspace.branch: {PLAIN_BRANCH}")
        for name in ("files_changed", "insertions", "deletions"):
            value = data.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
                raise WorkspaceProblem(f"workspace.{name}: a count")
        for name in ("pushed", "patch_omitted"):
            if not isinstance(data.get(name, False), bool):
                raise WorkspaceProblem(f"workspace.{name}: true or false")
        error = data.get("push_error")
        if error is not None and not isinstance(error, str):
            raise WorkspaceProblem("workspace.push_error: text or null")
        return cls(
            base=data["base"],
            head=data["head"],
            branch=data["branch"],
            pushed=data.get("pushed", False),
            push_error=error[:MAX_PUSH_ERROR_CHARS] if error else None,
            files_changed=data["files_changed"],
            insertions=data["insertions"],
            deletions=data["deletions"],
            patch_omitted=data.get("patch_omitted", False),
        )


def commit_subject(prompt: str, limit: int = 72) -> str:
    """A commit's subject from a task's prompt: its first non-empty line, without the model's
    directives, cut at `limit` characters."""
    for line in prompt.splitlines():
        text = re.sub(r"\[\[.*?\]\]", "", line).strip()
        if text:
            return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
    return "BLOOM task"


def other_branch_dependencies(
    workspace: dict[str, Any] | None, dependencies: Sequence[tuple[str, dict[str, Any] | None]]
) -> list[str]:
    """Of a task's dependencies (id, stored workspace), the workspace tasks of its own repository
    that write another branch: a new branch of the task starts at their head (docs/graphs.md)."""
    if not workspace:
        return []
    return [
        task_id
        for task_id, theirs in dependencies
        if theirs
        and theirs.get("repo") == workspace["repo"]
        and theirs.get("branch") != workspace["branch"]
    ]


def start_problem(
    workspace: dict[str, Any] | None,
    dependencies: Sequence[tuple[str, dict[str, Any] | None]],
) -> tuple[str, str] | None:
    """Why a workspace task's dependencies cannot give it one place to start, as (field,
    message), or None: it depends on workspace tasks of its repository that write more than one
    branch (merging branches, a fan-in, is not built), or it names a `ref` while a dependency
    of another branch is where it starts."""
    if not workspace:
        return None
    repo = workspace["repo"]
    branches = sorted(
        {
            str(theirs.get("branch"))
            for _, theirs in dependencies
            if theirs and theirs.get("repo") == repo
        }
    )
    if len(branches) > 1:
        return (
            "depends_on",
            f"it depends on workspace tasks of {repo} that write {len(branches)} branches "
            f"({', '.join(branches)}): merging branches is not built; depend on the tasks of "
            "one branch, or give this task no workspace",
        )
    if workspace.get("ref") and other_branch_dependencies(workspace, dependencies):
        return (
            "workspace",
            "ref: it starts from its dependency's branch head (it depends on a workspace task "
            f"of {repo} that writes {branches[0]}); leave ref out",
        )
    return None
