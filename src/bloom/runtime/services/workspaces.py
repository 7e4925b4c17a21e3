"""Workspaces on the runtime's side: a create's `workspace` resolved to what the task keeps (the
managed project's repository URL, the branch), and a branch's history as its tasks left it, from
which a worker that lacks the branch rebuilds it (docs/workspaces.md). A new branch of a task
that depends on a workspace task of its repository starts at that task's head: its history is
that task's branch's, up to that task (docs/graphs.md)."""

from dataclasses import dataclass
from typing import Any

from bloom.domain.errors import Forbidden, InvalidField, NotFound
from bloom.domain.models import Result, Task
from bloom.domain.states import ResultStatus, TaskStatus
from bloom.domain.workspace import (
    WorkspaceSpec,
    default_branch,
    key_of,
    other_branch_dependencies,
)
from bloom.runtime.services.records import RecordService
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

HISTORY_LIMIT = 1000
"""The newest steps of a branch the history gives: a branch rebuilt from patches alone starts
from the oldest of them."""
MAX_HISTORY_PATCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkspaceRequest:
    """A create's `workspace`, checked for its form (`api.schemas.WorkspaceBody`)."""

    repo: str
    ref: str | None = None
    branch: str | None = None
    push: bool | None = None


async def resolve(tx: Repositories, request: WorkspaceRequest, context_id: str) -> dict[str, Any]:
    """The workspace as the task keeps it; InvalidField (400): `repo` names no managed project."""
    project = await tx.projects.by_name(request.repo)
    if project is None:
        raise InvalidField("workspace", f'repo: no managed project is named "{request.repo}"')
    spec = WorkspaceSpec(
        repo=project.name,
        repo_url=project.repo_url,
        branch=request.branch or default_branch(context_id),
        ref=request.ref,
        push=True if request.push is None else request.push,
    )
    return spec.to_json()


def _start(result: Result) -> dict[str, Any]:
    """The dependency's success a new branch starts from."""
    workspace = result.workspace or {}
    return {
        "task_id": result.task_id,
        "branch": workspace.get("branch"),
        "head": workspace.get("head"),
    }


def _step(result: Result) -> dict[str, Any]:
    """A result's `workspace` (base, head, counts, push, patch artifact) with whose it is."""
    mine = {"task_id": result.task_id, "result_id": result.id, "completed_at": result.completed_at}
    return mine | (result.workspace or {})


class WorkspaceService:
    def __init__(self, db: RuntimeDatabase, records: RecordService):
        self.db = db
        self.records = records

    async def history(
        self, task_id: str, *, worker_id: str | None, with_patches: bool = False
    ) -> dict[str, Any]:
        """The task's workspace and its branch's steps, oldest first: each task that changed
        it (`base` to `head`, its patch), and `head`, where the branch stands as the runtime
        knows it (None: no task has written it yet, and it starts from no dependency). A branch
        that starts (or started) at a dependency's head has that dependency's branch's steps
        first (`start` names it while the branch has no steps of its own). A worker reads it
        for its own task only; `with_patches` adds each step's patch text, for a branch rebuilt
        from them."""
        async with self.db.read() as tx:
            task = await tx.tasks.get(task_id)
            if task is None:
                raise NotFound("Task not found")
            if worker_id is not None and task.worker_id != worker_id:
                raise Forbidden("A worker key reads the workspace of its own tasks only")
            key = key_of(task.workspace)
            if key is None:
                raise NotFound("The task has no workspace")
            results = await tx.results.of_branch(key, HISTORY_LIMIT)
            steps = [_step(result) for result in results if result.workspace]
            own = bool(steps)
            steps, origin = await self._from_dependencies(tx, task, steps)
        start = None if own or origin is None else _start(origin)
        head = steps[-1]["head"] if steps else None
        changed = [step for step in steps if step["head"] != step["base"]]
        if with_patches:
            for step in changed:
                step["patch"] = await self._patch(step["patch_artifact_id"])
        return {
            "task_id": task_id,
            "workspace": task.workspace,
            "head": head,
            "start": start,
            "steps": changed,
        }

    async def _origin(self, tx: Repositories, task: Task) -> tuple[Result, str] | None:
        """Where a new branch of `task` starts: the newest success among its dependencies that
        are workspace tasks of its repository on another branch (at create, they write one
        branch), with that branch's key; None: it starts as any branch does."""
        if not task.dependencies or not task.workspace:
            return None
        upstream = await tx.graphs.upstream_workspaces(task.id)
        keys = dict(upstream)
        newest: tuple[Result, str] | None = None
        for dependency in other_branch_dependencies(task.workspace, upstream):
            for result in await tx.results.of_task(dependency):
                if result.status is not ResultStatus.SUCCESS or not result.workspace:
                    continue
                if newest is None or result.completed_at > newest[0].completed_at:
                    newest = (result, str(key_of(keys[dependency])))
        return newest

    async def _from_dependencies(
        self, tx: Repositories, task: Task, steps: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], Result | None]:
        """`steps` with the steps they grew from: while the branch's first writer (or, with no
        steps yet, `task`) started at a dependency's head, that dependency's branch up to it
        comes first (at most `HISTORY_LIMIT` steps in all); and the first such dependency's
        success (None: there is none)."""
        seen: set[str] = set()
        first_origin: Result | None = None
        while len(steps) < HISTORY_LIMIT:
            first = task if not steps else await tx.tasks.get(steps[0]["task_id"])
            if first is None or first.id in seen:
                break
            seen.add(first.id)
            origin = await self._origin(tx, first)
            if origin is None:
                break
            result, key = origin
            if steps and steps[0]["base"] != (result.workspace or {}).get("head"):
                break  # it continued a branch of its own, not the dependency's
            first_origin = first_origin or result
            earlier = [_step(r) for r in await tx.results.of_branch(key, HISTORY_LIMIT)]
            ids = [step["result_id"] for step in earlier]
            if result.id not in ids:  # past the newest steps of its branch: its own step only
                steps = [_step(result), *steps]
                break
            steps = earlier[: ids.index(result.id) + 1] + steps
        return steps[-HISTORY_LIMIT:], first_origin

    async def waiting_for(self, task: Task) -> dict[str, Any] | None:
        """Why a queued task waits: workers are online but none has its agent CLI
        (`{reason: "no_worker_with_cli", cli}`; with no worker online, nothing is said), or
        (a workspace task) another task writes its branch (`{reason: "branch_busy", task_id,
        repo, branch}`); None: for neither."""
        if task.status is not TaskStatus.QUEUED:
            return None
        key = key_of(task.workspace)
        async with self.db.read() as tx:
            if await tx.workers.none_online_with_cli(task.cli):
                return {"reason": "no_worker_with_cli", "cli": task.cli}
            if key is None or task.workspace is None:
                return None
            writer = await tx.tasks.branch_writer(key)
        if writer is None or writer == task.id:
            return None
        repo, branch = task.workspace["repo"], task.workspace["branch"]
        return {"reason": "branch_busy", "task_id": writer, "repo": repo, "branch": branch}

    async def _patch(self, artifact_id: str | None) -> str | None:
        if artifact_id is None:
            return None
        content = await self.records.artifact_content(artifact_id)
        if content.size == 0 or content.size > MAX_HISTORY_PATCH_BYTES:
            return None
        chunks = await content.open(0, content.size - 1)
        return b"".join([chunk async for chunk in chunks]).decode()
