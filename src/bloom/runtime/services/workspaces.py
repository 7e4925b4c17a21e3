"""Workspaces on the runtime's side: a create's `workspace` resolved to what the task keeps (the
managed project's repository URL, the branch), and a branch's history as its tasks left it, from
which a worker that lacks the branch rebuilds it (docs/workspaces.md)."""

from dataclasses import dataclass
from typing import Any

from bloom.domain.errors import Forbidden, InvalidField, NotFound
from bloom.domain.models import Result, Task
from bloom.domain.states import TaskStatus
from bloom.domain.workspace import WorkspaceSpec, default_branch, key_of
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
        knows it (None: no task has written it yet). A worker reads it for its own task only;
        `with_patches` adds each step's patch text, for a branch rebuilt from them."""
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
        head = steps[-1]["head"] if steps else None
        changed = [step for step in steps if step["head"] != step["base"]]
        if with_patches:
            for step in changed:
                step["patch"] = await self._patch(step["patch_artifact_id"])
        return {"task_id": task_id, "workspace": task.workspace, "head": head, "steps": changed}

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
