"""LLM tasks: create (one or a batch), read, cancel, requeue."""

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request

from bloom.domain.identity import Role
from bloom.domain.models import Task
from bloom.domain.states import TaskStatus
from bloom.runtime.api.deps import (
    Budgets,
    Caller,
    Graphs,
    Records,
    Tasks,
    Workspaces,
    app_container,
    caller_of,
)
from bloom.runtime.api.schemas import Cli, CreateTaskBody, CreateTasksBody, TasksCreated
from bloom.runtime.http import JSON, invalid

router = APIRouter(prefix="/api/runtime", tags=["tasks"])
MAX_PAGE = 5000
MAX_OFFSET = 1_000_000_000


@router.post(
    "/llm-tasks",
    status_code=201,
    response_model=Task,
    responses={200: {"description": "Known idempotency key: the task created the first time"}},
    summary="Queue a task",
)
async def create_task(
    body: CreateTaskBody,
    request: Request,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSON:
    # The service and the caller from the request, not as dependencies (lease_protocol.claim)
    if body.idempotency_key and idempotency_key and body.idempotency_key != idempotency_key:
        return invalid("Idempotency-Key header and idempotency_key differ", "idempotency_key")
    tasks = app_container(request).tasks
    task, created = await tasks.create(body.new_task(idempotency_key), caller_of(request).actor)
    return JSON(task, status_code=201 if created else 200)


@router.post(
    "/llm-tasks/batch",
    status_code=201,
    response_model=TasksCreated,
    responses={200: {"description": "Every idempotency key was known: no task created"}},
    summary="Queue up to 1,000 tasks in one transaction (all or none), in order",
)
async def create_tasks(body: CreateTasksBody, tasks: Tasks, caller: Caller) -> JSON:
    done = await tasks.create_many([item.new_task() for item in body.tasks], caller.actor)
    created = sum(fresh for _, fresh in done)
    reply = TasksCreated(tasks=[task for task, _ in done], created=created)
    return JSON(reply, status_code=201 if created else 200)


@router.get("/llm-tasks", response_model=list[Task], summary="Tasks, newest first")
async def list_tasks(
    tasks: Tasks,
    budgets: Budgets,
    status: TaskStatus | None = None,
    cli: Annotated[Cli | None, Query(description="Only the tasks of this agent CLI.")] = None,
    limit: Annotated[int, Query(ge=1, description="At most 5000 are returned.")] = 500,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> JSON:
    found = await tasks.find(status=status, cli=cli, limit=min(limit, MAX_PAGE), offset=offset)
    return JSON(await budgets.with_holds(found))


@router.get("/llm-tasks/{task_id}", response_model=Task, summary="One task")
async def get_task(
    task_id: str, tasks: Tasks, budgets: Budgets, records: Records, workspaces: Workspaces
) -> JSON:
    """A queued task whose project's budget is spent carries `hold`: `{project, until,
    reason: "budget_exhausted"}` (it waits, nothing failed); one whose branch another task
    writes, `waiting_for: {reason: "branch_busy", task_id, repo, branch}`. A running task whose
    attempt has printed nothing past its `stall_sec` carries `stall`: `{lease_id, worker_id,
    stalled_at, silent_since}`."""
    task = await tasks.get(task_id)
    stall = await records.stall(task)
    if stall is not None:
        return JSON(asdict(task) | {"stall": stall})
    answer = (await budgets.with_holds([task]))[0]
    waiting = await workspaces.waiting_for(task)
    if waiting is None:
        return JSON(answer)
    return JSON((answer if isinstance(answer, dict) else asdict(answer)) | {"waiting_for": waiting})


@router.get(
    "/llm-tasks/{task_id}/graph",
    summary="The graph around a task: what it depends on and what depends on it, with statuses",
)
async def task_graph(task_id: str, graphs: Graphs) -> JSON:
    """`{task_id, status, upstream: [{id, status, ref, settled, ...}], downstream: [...],
    downstream_truncated}`: upstream in the order the task named them, downstream oldest first
    (at most 1,000). docs/graphs.md."""
    return JSON(await graphs.graph(task_id))


@router.get(
    "/llm-tasks/{task_id}/workspace",
    summary="A workspace task's branch as its tasks left it: where it stands, each change",
)
async def task_workspace(
    task_id: str,
    workspaces: Workspaces,
    caller: Caller,
    patches: Annotated[bool, Query(description="Add each change's patch text.")] = False,
) -> JSON:
    worker = caller.worker_id if caller.role is Role.WORKER else None
    return JSON(await workspaces.history(task_id, worker_id=worker, with_patches=patches))


@router.post("/llm-tasks/{task_id}/cancel", response_model=Task, summary="Cancel a task")
async def cancel_task(task_id: str, tasks: Tasks, caller: Caller) -> JSON:
    return JSON(await tasks.cancel(task_id, caller.actor))


@router.post(
    "/llm-tasks/{task_id}/requeue", response_model=Task, summary="Requeue a failed or dead task"
)
async def requeue_task(task_id: str, tasks: Tasks, caller: Caller) -> JSON:
    return JSON(await tasks.requeue(task_id, caller.actor))


@router.get("/runs", response_model=list[Task], summary="The 50 newest tasks")
async def runs(tasks: Tasks) -> JSON:
    return JSON(await tasks.runs())
