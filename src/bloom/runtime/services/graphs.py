"""Task graphs (docs/graphs.md): what a task's end does to the tasks that wait for it, in the
transaction of that end; the prompt a dependent runs with, composed at its grant; and the graph
around a task, for the API and the dashboard.

Every path that ends a task calls `ended` in the transaction that ends it (a complete, a cancel,
the reaper's expiry, a lost lease), so a dependent is released, or cancelled, exactly when its
dependency's end commits: no poller, no window."""

from dataclasses import dataclass, field, replace
from typing import Any

from bloom.domain.audit import AuditAction, task_audit
from bloom.domain.errors import NotFound
from bloom.domain.graph import MAX_ANSWER_CHARS, compose
from bloom.domain.models import Task
from bloom.domain.states import TaskStatus
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

DOWNSTREAM_LIMIT = 1_000
"""The graph answer lists at most this many dependents of a task."""


async def ended(tx: Repositories, task: Task, now: int, actor: str) -> None:
    """`task` has just ended (in `tx`): its waiting dependents learn it. Completed: each counts
    one wait off, and those it was the last for are queued. Failed, dead or cancelled: those that
    run anyway count it off the same way (and are told at their grant); the others are cancelled,
    audited with the reason, and so on down the graph, each marked as cancelled for the task it
    all comes from (`cancelled_for`: a requeue of that one puts them back). The tasks queued are
    in `tx.graphs.released`, for the caller to wake claims for once `tx` commits."""
    if not task.has_dependents:
        return
    if task.status is TaskStatus.COMPLETED:
        await _released(tx, task.id, now, actor, only_run=False)
        return
    if task.status not in (TaskStatus.FAILED, TaskStatus.DEAD, TaskStatus.CANCELLED):
        return
    root = task.cancelled_for or task.id
    pending = [(task.id, str(task.status))]
    while pending:
        dependency, status = pending.pop()
        await _released(tx, dependency, now, actor, only_run=True)
        reason = (
            f"Dependency {dependency} ended {status}"
            if dependency == root
            else f"Dependency {dependency} was cancelled (dependency {root} ended unsuccessfully)"
        )
        for task_id, has_dependents in await tx.graphs.cancel_waiting(
            dependency, root, reason, now
        ):
            await tx.audit.add(
                task_audit(AuditAction.TASK_CANCELLED, task_id, now=now, actor=actor, detail=reason)
            )
            if has_dependents:
                pending.append((task_id, "cancelled"))


async def _released(
    tx: Repositories, dependency: str, now: int, actor: str, *, only_run: bool
) -> None:
    for task_id in await tx.graphs.release(dependency, now, only_run=only_run):
        detail = (
            f"Released: its last dependency, {dependency}, completed"
            if not only_run
            else f"Released: its last dependency, {dependency}, ended unsuccessfully "
            "(on_dependency_failure: run)"
        )
        await tx.audit.add(
            task_audit(AuditAction.TASK_RELEASED, task_id, now=now, actor=actor, detail=detail)
        )


async def restore(tx: Repositories, task_id: str, now: int, actor: str) -> list[str]:
    """`task_id` was requeued: the tasks cancelled only for it are blocked again (audited)."""
    restored = await tx.graphs.restore(task_id, now)
    for restored_id in restored:
        await tx.audit.add(
            task_audit(
                AuditAction.TASK_REBLOCKED,
                restored_id,
                now=now,
                actor=actor,
                detail=f"Blocked again: dependency {task_id} was requeued",
            )
        )
    return restored


async def with_answers(tx: Repositories, task: Task) -> Task:
    """The task as its worker is granted it: with its dependencies' answers before its prompt
    (`domain.graph.compose`); a task without dependencies as it is, at no cost."""
    if task.dependencies == 0:
        return task
    answers = await tx.graphs.answers(task.id, MAX_ANSWER_CHARS + 1)
    return replace(task, prompt=compose(task.prompt, answers))


@dataclass(frozen=True, slots=True)
class Graph:
    """The graph around a task: the tasks it depends on (in the order it named them) and the
    tasks that depend on it (oldest first), each with its status."""

    task_id: str
    status: str
    upstream: list[dict[str, Any]] = field(default_factory=list)
    downstream: list[dict[str, Any]] = field(default_factory=list)
    downstream_truncated: bool = False


class GraphService:
    def __init__(self, db: RuntimeDatabase):
        self.db = db

    async def graph(self, task_id: str) -> Graph:
        async with self.db.read() as tx:
            task = await tx.tasks.get(task_id)
            if task is None:
                raise NotFound("Task not found")
            upstream = await tx.graphs.upstream(task_id) if task.dependencies else []
            downstream = (
                await tx.graphs.downstream(task_id, DOWNSTREAM_LIMIT + 1)
                if task.has_dependents
                else []
            )
        return Graph(
            task_id=task_id,
            status=str(task.status),
            upstream=[_node(row) for row in upstream],
            downstream=[_node(row) for row in downstream[:DOWNSTREAM_LIMIT]],
            downstream_truncated=len(downstream) > DOWNSTREAM_LIMIT,
        )


def _node(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "status": row["status"],
        "ref": row["ref"],
        "settled": bool(row["settled"]),
        "with_artifacts": bool(row["with_artifacts"]),
        "agent_slug": row["agent_slug"],
        "context_id": row["context_id"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "waiting_on": row["waiting_on"],
        "cancelled_for": row["cancelled_for"],
    }
