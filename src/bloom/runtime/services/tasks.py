"""Task use-cases: create (idempotently), read (one, a filtered page, counts), cancel, requeue."""

import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from bloom.domain.approvals import CANCELLED_NOTE
from bloom.domain.audit import AuditAction, task_audit
from bloom.domain.clis import DEFAULT_CLI
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, InvalidField, NotFound
from bloom.domain.graph import (
    Edges,
    GraphProblem,
    OnDependencyFailure,
    Planned,
    Start,
    plan,
    start_of,
)
from bloom.domain.ids import new_id
from bloom.domain.models import AuditEntry, Task
from bloom.domain.paging import Cursor, Page, check_limit, page_of
from bloom.domain.policy import DEFAULT_POLICY
from bloom.domain.states import (
    CANCELLABLE,
    IN_FLIGHT,
    REQUEUEABLE,
    WAITING,
    TaskStatus,
)
from bloom.domain.tool_policy import PolicyProblem, ToolPolicy, effective
from bloom.domain.workspace import default_branch, start_problem
from bloom.runtime.services import graphs
from bloom.runtime.services.leasing import LeaseSettings, wake_for
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.services.workspaces import WorkspaceRequest, resolve
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

RUNS_LIMIT = 50
SEARCH_WINDOW = 20_000
"""A page under several filters, or a text, searches this many tasks at most, newest first (then
says where it stopped): 2-25 ms, whatever the table holds (docs/benchmarks.md)."""


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks a page lists; None matches anything. `text` matches the prompt (a substring,
    any case) or the id (any part of it: the dashboard shows an id's tail)."""

    status: TaskStatus | None = None
    worker_id: str | None = None
    context_id: str | None = None
    agent_slug: str | None = None
    cli: str | None = None
    text: str | None = None

    def equal(self) -> dict[str, str]:
        """The columns a task must equal, by name."""
        values = {
            "status": self.status,
            "worker_id": self.worker_id,
            "context_id": self.context_id,
            "agent_slug": self.agent_slug,
            "cli": self.cli,
        }
        return {name: str(value) for name, value in values.items() if value is not None}


def task_position(task: Task) -> Cursor:
    return Cursor(task.created_at, task.id)


@dataclass(slots=True)
class NewTask:
    """A validated create request."""

    context_id: str
    agent_slug: str
    prompt: str
    context_hints: list[str] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_POLICY))
    desired_format: str = "text"
    max_attempts: int = 3
    priority: int = 0
    idempotency_key: str | None = None
    workspace: WorkspaceRequest | None = None
    depends_on: list[str] = field(default_factory=list)
    """Tasks it waits for: ids of tasks that exist, or refs of its batch (docs/graphs.md)."""
    ref: str | None = None
    """Its name in its batch, for later tasks of the batch to name in `depends_on`."""
    on_dependency_failure: OnDependencyFailure = OnDependencyFailure.CANCEL
    cli: str = DEFAULT_CLI
    dependency_artifacts: list[str] = field(default_factory=list)
    """Of `depends_on`, those whose artifacts are passed on with their answers."""

    def fingerprint(self) -> str:
        """Identifies the request's content, so a reused idempotency key can be told apart
        (the default `cli` and no `dependency_artifacts` left out: a request from before them
        keeps its fingerprint)."""
        body = asdict(self)
        body.pop("idempotency_key")
        if body["cli"] == DEFAULT_CLI:
            body.pop("cli")
        if not body["dependency_artifacts"]:
            body.pop("dependency_artifacts")
        return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _with_tools(tx: Repositories, new: NewTask) -> dict[str, Any]:
    """The task's policy with its effective `tools`: its project's defaults merged with its own
    (left out when neither has any). InvalidField (400) on what the merge refuses."""
    given = new.policy.get("tools")
    project = await tx.tool_policies.get(new.agent_slug)
    try:
        tools = effective(ToolPolicy.from_json(given) if given else None, project)
    except PolicyProblem as exc:
        raise InvalidField("policy", f"tools.{exc}") from None
    policy = {name: value for name, value in new.policy.items() if name != "tools"}
    return policy if tools is None else policy | {"tools": tools.to_json()}


class TaskService:
    def __init__(
        self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock, leasing: LeaseSettings
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.leasing = leasing
        self.search_window = SEARCH_WINDOW

    async def create(self, new: NewTask, actor: str | None = None) -> tuple[Task, bool]:
        """Queue a task, audited as `actor`'s (the seed's "api" when None). Returns (task,
        created); a known idempotency key returns the task it created before, provided the
        request is the same."""
        if (
            new.idempotency_key is None
            and new.workspace is None
            and not new.depends_on
            and not new.dependency_artifacts
            and self.db.kind == "postgresql"
        ):
            return await self._queue(new, actor or "api"), True
        (created,) = await self.create_many([new], actor)
        return created

    async def _queue(self, new: NewTask, actor: str) -> Task:
        """PostgreSQL, a task without an idempotency key or a workspace (resolving one reads):
        its row, its audit entry and whom it wakes in one statement that commits alone
        (`TaskRepository.insert_queued`)."""
        now = self.clock()
        async with self.db.single() as tx:
            # its project's tool policy read first: two statements, still no transaction
            task = self._task(new, now, await _with_tools(tx, new))
            entry = self._created_audit(task, now, actor)
            ready, keeper = await tx.tasks.insert_queued(task, entry, self.leasing.keeping(now))
            tx.audit.written(entry)
        self.signal.changed(Wake.for_tasks([keeper]) if ready else Wake(0))
        return task

    async def create_many(
        self, news: list[NewTask], actor: str | None = None
    ) -> list[tuple[Task, bool]]:
        """Queue tasks in one transaction: all of them, or (on a refusal) none. Each answers as
        `create` would, in order."""
        now = self.clock()
        edges = _planned(news)
        async with self.db.write() as tx:
            if edges is None:
                created = [await self._create(tx, new, now, actor or "api") for new in news]
            else:
                created = await self._create_graph(tx, news, edges, now, actor or "api")
            fresh = [
                task.id
                for task, is_fresh in created
                if is_fresh and task.status is TaskStatus.QUEUED
            ]
            wake = await wake_for(tx, self.leasing, now, fresh)
        if fresh:
            self.signal.changed(wake)
        return created

    async def _create_graph(
        self, tx: Repositories, news: list[NewTask], edges: Edges, now: int, actor: str
    ) -> list[tuple[Task, bool]]:
        """A batch with dependencies: the tasks it names that exist flagged (their rows locked:
        a complete of one of them commits before, and is seen, or after, and sees the edges),
        then each task made in an order where its batch dependencies come first, blocked while
        any dependency has not ended as it needs, its edges with it."""
        known = await tx.graphs.mark_dependents(sorted(edges.existing_ids()))
        for index, names in enumerate(edges.existing):
            for name in names:
                if name not in known:
                    raise InvalidField(
                        _field(news, index, "depends_on"),
                        f'"{name}" is neither a task nor a ref of this batch',
                    )
        # (status, cancelled_for) of every dependency, existing or made here, and its workspace
        ends: dict[str, tuple[TaskStatus, str | None]] = {}
        workspaces: dict[str, dict[str, Any] | None] = {}
        for task_id, (status, _, workspace) in known.items():
            ends[task_id] = (TaskStatus(status), None)
            workspaces[task_id] = workspace
        has_dependents = {j for mine in edges.in_batch for j in mine}
        made: dict[int, tuple[Task, bool]] = {}
        for index in edges.order():
            new = news[index]
            if edges.in_batch[index] or edges.existing[index]:
                for j in edges.in_batch[index]:
                    task = made[j][0]
                    ends[task.id] = (task.status, task.cancelled_for)
                    workspaces[task.id] = task.workspace
                named = _ordered(new, news, made, edges, index)
                problem = start_problem(
                    _requested(new), [(task_id, workspaces[task_id]) for task_id, _, _ in named]
                )
                if problem is not None:
                    raise InvalidField(_field(news, index, problem[0]), problem[1])
                made[index] = await self._create(
                    tx,
                    new,
                    now,
                    actor,
                    waits=start_of(new.on_dependency_failure, named, ends),
                    has_dependents=index in has_dependents,
                )
            else:
                made[index] = await self._create(
                    tx, new, now, actor, has_dependents=index in has_dependents
                )
        return [made[index] for index in range(len(news))]

    async def _create(
        self,
        tx: Repositories,
        new: NewTask,
        now: int,
        actor: str,
        *,
        waits: Start | None = None,
        has_dependents: bool = False,
    ) -> tuple[Task, bool]:
        fingerprint = new.fingerprint() if new.idempotency_key else None
        if new.idempotency_key is not None:
            known = await self._known(tx, new.idempotency_key, fingerprint)
            if known is not None:
                return known, False
        workspace = await resolve(tx, new.workspace, new.context_id) if new.workspace else None
        task = self._task(new, now, await _with_tools(tx, new), workspace)
        if waits is not None:
            task = replace(
                task,
                status=waits.status,
                dependencies=len(waits.edges),
                waiting_on=waits.waiting_on,
                on_dependency_failure=str(new.on_dependency_failure),
                cancelled_for=waits.cancelled_for,
                last_error=waits.reason,
                queued_at=now if waits.status is TaskStatus.QUEUED else None,
            )
        if has_dependents:
            task = replace(task, has_dependents=True)
        if not await tx.tasks.insert(task, fingerprint):
            # a concurrent create with the same key got there first
            assert new.idempotency_key is not None
            known = await self._known(tx, new.idempotency_key, fingerprint)
            assert known is not None
            return known, False
        await tx.audit.add(self._created_audit(task, now, actor))
        if waits is not None:
            await tx.graphs.insert_edges(
                [
                    {
                        "task_id": task.id,
                        "depends_on": dependency,
                        "position": position,
                        "ref": ref,
                        "settled": settled,
                        "with_artifacts": with_artifacts,
                    }
                    for position, (dependency, ref, settled, with_artifacts) in enumerate(
                        waits.edges
                    )
                ]
            )
            if task.status is TaskStatus.CANCELLED:
                await tx.audit.add(
                    task_audit(
                        AuditAction.TASK_CANCELLED,
                        task.id,
                        now=now,
                        actor=actor,
                        detail=waits.reason or "Cancelled: a dependency ended unsuccessfully",
                    )
                )
        return task, True

    @staticmethod
    def _task(
        new: NewTask, now: int, policy: dict[str, Any], workspace: dict[str, Any] | None = None
    ) -> Task:
        return Task(
            id=new_id(now),
            context_id=new.context_id,
            agent_slug=new.agent_slug,
            prompt=new.prompt,
            context_hints=new.context_hints,
            policy=policy,
            desired_format=new.desired_format,
            status=TaskStatus.QUEUED,
            created_at=now,
            updated_at=now,
            lease_id=None,
            worker_id=None,
            attempts=0,
            max_attempts=new.max_attempts,
            priority=new.priority,
            idempotency_key=new.idempotency_key,
            queued_at=now,
            workspace=workspace,
            cli=new.cli,
        )

    @staticmethod
    def _created_audit(task: Task, now: int, actor: str) -> AuditEntry:
        detail = f"Task for agent {task.agent_slug}, context {task.context_id}"
        if task.dependencies:
            detail += (
                f", depends on {task.dependencies} task(s), waiting on {task.waiting_on}"
                if task.status is TaskStatus.BLOCKED
                else f", depends on {task.dependencies} task(s)"
            )
        return task_audit(AuditAction.TASK_CREATED, task.id, now=now, actor=actor, detail=detail)

    @staticmethod
    async def _known(tx: Repositories, key: str, fingerprint: str | None) -> Task | None:
        found = await tx.tasks.get_by_idempotency_key(key)
        if found is None:
            return None
        task, stored_fingerprint = found
        if stored_fingerprint != fingerprint:
            raise Conflict(f"Idempotency key '{key}' was already used for a different request")
        return task

    async def get(self, task_id: str) -> Task:
        async with self.db.read() as tx:
            task = await tx.tasks.get(task_id)
        if task is None:
            raise NotFound("Task not found")
        return task

    async def find(
        self, *, status: str | None, limit: int, offset: int = 0, cli: str | None = None
    ) -> list[Task]:
        """Newest first: those in `status` and of the agent CLI `cli` (None: any)."""
        async with self.db.read() as tx:
            return await tx.tasks.find(status=status, limit=limit, offset=offset, cli=cli)

    async def page(self, filter: TaskFilter, *, after: Cursor | None, limit: int) -> Page[Task]:
        """Tasks matching `filter`, newest first by (created_at, id), from after the cursor.

        Under more than one filter, or a text, a page searches `search_window` tasks at most: it
        may then hold fewer than `limit` (even none) and still have a `next`, where the search
        stopped; the pages walked to the end hold every match once, in order."""
        check_limit(limit)
        text = filter.text or None  # an empty text matches everything anyway
        async with self.db.read() as tx:
            rows, stopped_at = await tx.tasks.page(
                equal=filter.equal(),
                text=text,
                after=after,
                limit=limit + 1,
                window=self.search_window,
            )
        page = page_of(rows, limit, task_position)
        return page if page.next or stopped_at is None else Page(page.items, stopped_at)

    async def counts(self) -> dict[str, int]:
        """Tasks per status: every status, 0 when none."""
        async with self.db.read() as tx:
            counted, _ = await tx.counts.totals()
        return counted

    async def runs(self) -> list[Task]:
        """The seed's `runs`: the newest tasks."""
        return await self.find(status=None, limit=RUNS_LIMIT)

    async def cancel(self, task_id: str, actor: str | None = None) -> Task:
        """Blocked, queued or awaiting approval: cancelled at once (pending calls expired). In
        flight: flagged; the worker learns it from its next heartbeat and stops (or the lease
        lapses and the reaper cancels it)."""
        now = self.clock()
        async with self.db.write() as tx:
            for _ in range(3):  # a queued task may be leased between our read and our write
                task = await tx.tasks.get(task_id)
                if task is None:
                    raise NotFound("Task not found")
                if task.status not in CANCELLABLE:
                    raise Conflict(f"Cannot cancel task with status '{task.status}'")
                if task.status in WAITING:
                    updated = await tx.tasks.transition(
                        task_id,
                        from_statuses=[task.status],
                        values={"status": TaskStatus.CANCELLED, "updated_at": now},
                    )
                    if updated is not None and task.status == TaskStatus.AWAITING_APPROVAL:
                        await tx.approvals.close_pending(
                            task_id, by=actor or "admin", at=now, note=CANCELLED_NOTE
                        )
                    action, detail = AuditAction.TASK_CANCELLED, f"Cancelled while {task.status}"
                else:
                    updated = await tx.tasks.transition(
                        task_id,
                        from_statuses=IN_FLIGHT,
                        lease_id=task.lease_id,
                        values={"cancel_requested": True, "updated_at": now},
                    )
                    action = AuditAction.TASK_CANCEL_REQUESTED
                    detail = f"Cancel requested while {task.status} on worker {task.worker_id}"
                if updated is not None:
                    await tx.audit.add(
                        task_audit(action, task_id, now=now, actor=actor or "admin", detail=detail)
                    )
                    # what waits on it is cancelled with it (or, running anyway, released)
                    await graphs.ended(tx, updated, now, actor or "admin")
                    return updated
        raise Conflict("Task changed state repeatedly while cancelling; try again")

    async def requeue(self, task_id: str, actor: str | None = None) -> Task:
        """Put a failed or dead task back in the queue with a fresh attempt budget."""
        now = self.clock()
        async with self.db.write() as tx:
            task = await tx.tasks.get(task_id)
            if task is None:
                raise NotFound("Task not found")
            updated = await tx.tasks.transition(
                task_id,
                from_statuses=REQUEUEABLE,
                values={
                    "status": TaskStatus.QUEUED,
                    "lease_id": None,
                    "worker_id": None,
                    "attempts": 0,
                    "queued_at": now,
                    "not_before": None,
                    "cancel_requested": False,
                    "updated_at": now,
                },
            )
            if updated is None:
                raise Conflict(f"Cannot requeue task with status '{task.status}'")
            if updated.has_dependents:
                await graphs.restore(tx, task_id, now, actor or "admin")
            wake = await wake_for(tx, self.leasing, now, [task_id])
            await tx.audit.add(
                task_audit(
                    AuditAction.TASK_REQUEUED,
                    task_id,
                    now=now,
                    actor=actor or "admin",
                    detail=f"Requeued from {task.status}",
                )
            )
        self.signal.changed(wake)
        return updated


def _planned(news: list[NewTask]) -> Edges | None:
    """The batch's dependencies resolved (None: it has none); InvalidField (400) naming the
    task's field on a ref used twice, a cycle, a name twice, or more than the bound."""
    if not any(new.depends_on or new.ref or new.dependency_artifacts for new in news):
        return None
    single = len(news) == 1
    try:
        edges = plan(
            [Planned(new.ref, new.depends_on, new.dependency_artifacts) for new in news],
            field_of="" if single else "tasks.{index}.",
        )
    except GraphProblem as exc:
        raise InvalidField(exc.field, exc.message) from None
    return edges if any(new.depends_on for new in news) else None


def _field(news: list[NewTask], index: int, name: str) -> str:
    return name if len(news) == 1 else f"tasks.{index}.{name}"


def _requested(new: NewTask) -> dict[str, Any] | None:
    """The workspace a create asks for, as far as its start is concerned: repo, branch, ref."""
    if new.workspace is None:
        return None
    branch = new.workspace.branch or default_branch(new.context_id)
    return {"repo": new.workspace.repo, "branch": branch, "ref": new.workspace.ref}


def _ordered(
    new: NewTask,
    news: list[NewTask],
    made: dict[int, tuple[Task, bool]],
    edges: Edges,
    index: int,
) -> list[tuple[str, str | None, bool]]:
    """The task's dependencies as (id, ref, with its artifacts) in the order its `depends_on`
    named them."""
    by_name: dict[str, tuple[str, str | None]] = {}
    for j in edges.in_batch[index]:
        ref = news[j].ref
        assert ref is not None
        by_name[ref] = (made[j][0].id, ref)
    for task_id in edges.existing[index]:
        by_name[task_id] = (task_id, None)
    asked = set(new.dependency_artifacts)
    return [(*by_name[name], name in asked) for name in new.depends_on]
