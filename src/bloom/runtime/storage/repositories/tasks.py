"""SQL for `llm_tasks`: inserts, reads, pages and compare-and-set transitions (the claim's own SQL
is in `claiming.py`)."""

import functools
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import (
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.executor import Connection
from bloom.db.repository import (
    LIKE_ESCAPE,
    Repository,
    entity_values,
    is_state,
    like_literal,
    older_than,
    text_rows,
    to_entity,
)
from bloom.domain.ids import id_time
from bloom.domain.models import AuditEntry, Task
from bloom.domain.paging import Cursor
from bloom.domain.states import TaskStatus
from bloom.domain.workspace import key_of
from bloom.runtime.storage.repositories.claiming import (
    CLAIM,
    CLAIM_GRANTING,
    CLAIM_SEVERAL,
    LEASE_QUEUED,
    WALK_THE_QUEUE_INDEX,
)
from bloom.runtime.storage.repositories.keepers import (
    keeper_named,
)
from bloom.runtime.storage.repositories.records import AUDIT_COLUMNS, TASK_COLUMNS
from bloom.runtime.storage.tables import audit_logs, llm_tasks

t = llm_tasks

_INSERT = insert(t)
_INSERT_KEYED = {
    kind: dialect.insert(t)
    .on_conflict_do_nothing(index_elements=[t.c.idempotency_key])
    .returning(t.c.id)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_GET = select(*TASK_COLUMNS).where(t.c.id == bindparam("b_id"))


def _insert_queued() -> Any:
    """PostgreSQL: a task without an idempotency key queued in one statement, which commits
    alone: its row and its audit entry (parameters `t_<column>`, `a_<column>`), and whom its
    queueing wakes (`keeper_named`), read in the same statement."""
    task_names = [column.name for column in TASK_COLUMNS]
    made = insert(t).values(
        {name: bindparam(f"t_{name}", type_=t.c[name].type) for name in task_names}
    )
    noted = insert(audit_logs).values(
        {
            column.name: bindparam(f"a_{column.name}", type_=column.type)
            for column in audit_logs.columns
        }
    )
    held, keeper = keeper_named()
    return select(held.label("held"), keeper.label("keeper")).add_cte(
        made.cte("made"), noted.cte("noted")
    )


_INSERT_QUEUED = _insert_queued()
# Only a task in flight: a queued row locked here would make claims (SKIP LOCKED) pass it over.
_LOCK_IN_FLIGHT = (
    select(t.c.id)
    .where(
        t.c.id == bindparam("b_id"),
        or_(is_state(t.c.status, "leased"), is_state(t.c.status, "running")),
    )
    .with_for_update()
)
_STATUS = select(t.c.status).where(t.c.id == bindparam("b_id"))
_BRANCH_WRITER = (
    select(t.c.id)
    .where(
        t.c.workspace_key == bindparam("b_key"),
        or_(is_state(t.c.status, "leased"), is_state(t.c.status, "running")),
    )
    .limit(1)
)
_BY_KEY = select(*TASK_COLUMNS, t.c.request_hash).where(t.c.idempotency_key == bindparam("b_key"))
_LIST = (
    select(*TASK_COLUMNS)
    .order_by(t.c.created_at.desc(), t.c.id.desc())
    .limit(bindparam("b_limit"))
    .offset(bindparam("b_offset"))
)
_OLDEST_QUEUED = select(func.min(t.c.created_at)).where(is_state(t.c.status, "queued"))

_PAGE_EQUALS = {
    "status": t.c.status,
    "worker_id": t.c.worker_id,
    "context_id": t.c.context_id,
    "agent_slug": t.c.agent_slug,
    "cli": t.c.cli,
}
"""The page filters that are equality on a column, by their parameter name; each has an index
on (it, created_at)."""


@functools.cache
def _list_statement(equal: frozenset[str]) -> Any:
    """`_LIST` under equalities, named by their parameters (`b_status`, `b_cli`)."""
    return _LIST.where(*(_PAGE_EQUALS[name[2:]] == bindparam(name) for name in sorted(equal)))


def _listing(equal: frozenset[str], after: bool) -> Any:
    """Tasks newest first by (created_at, id), equal to the columns named, older than a cursor:
    one index walked in order (`_PAGE_EQUALS`' for one column, created_at's for none)."""
    stmt = select(*TASK_COLUMNS).order_by(t.c.created_at.desc(), t.c.id.desc())
    for name in sorted(equal):
        stmt = stmt.where(_PAGE_EQUALS[name] == bindparam(f"b_{name}"))
    return stmt.where(older_than(t.c.created_at, t.c.id)) if after else stmt


@functools.cache
def _page_statement(equal: frozenset[str], after: bool) -> Any:
    """One page of tasks under at most one equality: its index walked, `b_limit` rows read."""
    return _listing(equal, after).limit(bindparam("b_limit"))


@functools.cache
def _window_end_statement(after: bool) -> Any:
    """The created_at of a window's last task: the `b_window`-th of the whole listing, counted
    from the millisecond before the cursor's (from created_at's index alone), when it holds
    that many. So a window also holds the rest of the cursor's millisecond and of its own last
    one (tasks created in the same millisecond: a few), and always ends before the cursor."""
    stmt = select(t.c.created_at).order_by(t.c.created_at.desc())
    if after:
        stmt = stmt.where(t.c.created_at < bindparam("b_at", type_=t.c.created_at.type))
    return stmt.offset(bindparam("b_window") - 1).limit(1)


_WINDOW_LAST = select(func.min(t.c.id)).where(t.c.created_at == bindparam("b_end_at"))
"""The id a window ends at: its last millisecond's oldest task's."""


@functools.cache
def _window_statement(kind: str, equal: frozenset[str], text: bool, after: bool, end: bool) -> Any:
    """One page of the tasks of a window (from the cursor down to created_at `b_end_at`, with
    `end`) that equal the columns named and, with `text`, hold the text.

    The window is a range of created_at, so whichever index the planner walks (created_at's,
    or an equality's after its column), it reads the window's rows at most, and stops once it
    has the page's. (A window as a subquery, LIMIT `b_window` under the filters, is not: the
    planner may walk created_at's index, filtering, until it has that many matches.)"""
    stmt = _listing(equal, after)
    if end:
        stmt = stmt.where(t.c.created_at >= bindparam("b_end_at", type_=t.c.created_at.type))
    if text:
        # Case folded for ASCII only, as SQLite's LIKE does: on PostgreSQL the C collation's
        # ILIKE scans twice as fast as a UTF-8 one's, and keeps the planner's estimate. Ids are
        # lower-case: a LIKE (five times cheaper than ILIKE) with the text lower-cased.
        prompt = t.c.prompt.collate("C") if kind == "postgresql" else t.c.prompt
        stmt = stmt.where(
            or_(
                prompt.ilike(bindparam("b_contains"), escape=LIKE_ESCAPE),
                t.c.id.like(bindparam("b_id_part"), escape=LIKE_ESCAPE),
            )
        )
    return stmt.limit(bindparam("b_limit"))


@functools.cache
def _transition_statement(from_statuses: frozenset[str], fenced: bool) -> Any:
    """The compare-and-set UPDATE for one set of source states (inlined, for the planner)."""
    stmt = (
        update(t)
        .where(
            t.c.id == bindparam("b_id"),
            or_(*(is_state(t.c.status, s) for s in sorted(from_statuses))),
        )
        .returning(*TASK_COLUMNS)
    )
    return stmt.where(t.c.lease_id == bindparam("b_lease")) if fenced else stmt


@functools.cache
def _transition_several_statement(from_statuses: frozenset[str]) -> Any:
    """PostgreSQL: `_transition_statement` (fenced) for several (task, lease) pairs at once."""
    named = text_rows("named", id="b_ids", lease_id="b_leases")
    return (
        update(t)
        .where(
            t.c.id == named.c.id,
            t.c.lease_id == named.c.lease_id,
            or_(*(is_state(t.c.status, s) for s in sorted(from_statuses))),
        )
        .returning(*TASK_COLUMNS)
    )


class TaskRepository(Repository):
    def __init__(self, connection: Connection):
        super().__init__(connection)
        self._walking = False
        """Whether this transaction set `WALK_THE_QUEUE_INDEX` already."""

    async def insert(self, task: Task, request_hash: str | None = None) -> bool:
        """Insert `task`; False when its idempotency key is already taken."""
        values = entity_values(task, TASK_COLUMNS) | {
            "request_hash": request_hash,
            "workspace_key": key_of(task.workspace),
        }
        if task.idempotency_key is None:
            await self.run(_INSERT, values)
            return True
        result = await self.run(_INSERT_KEYED[self.kind], values)
        return bool(result)

    async def insert_queued(
        self, task: Task, audit: AuditEntry, keeping: Mapping[str, int]
    ) -> tuple[bool, str | None]:
        """PostgreSQL: `task` (no idempotency key, no workspace) and its audit entry inserted in
        one statement (`_INSERT_QUEUED`), to run outside a transaction; whether it is ready
        (its project's budget not held) and its keeper, with `keeping`'s cutoffs."""
        params: dict[str, Any] = {
            f"t_{name}": value for name, value in entity_values(task, TASK_COLUMNS).items()
        }
        params |= {
            f"a_{name}": value for name, value in entity_values(audit, AUDIT_COLUMNS).items()
        }
        params |= {f"b_{name}": value for name, value in keeping.items()}
        params |= {"b_context": task.context_id, "b_agent": task.agent_slug, "b_cli": task.cli}
        row = (await self.run(_INSERT_QUEUED, params))[0]
        return not row["held"], row["keeper"]

    async def get(self, task_id: str) -> Task | None:
        return await self.one(Task, _GET, {"b_id": task_id})

    async def lock_in_flight(self, task_id: str) -> bool:
        """Hold the task's row lock to the end of the transaction if it is leased or running
        (PostgreSQL; SQLite has one writer already); False when it is not (or does not exist)."""
        return bool(await self.run(_LOCK_IN_FLIGHT, {"b_id": task_id}))

    async def branch_writer(self, workspace_key: str) -> str | None:
        """The task in flight that writes this repository branch, if one does."""
        writer: str | None = await self.scalar(_BRANCH_WRITER, {"b_key": workspace_key})
        return writer

    async def status(self, task_id: str) -> TaskStatus | None:
        status = await self.scalar(_STATUS, {"b_id": task_id})
        return None if status is None else TaskStatus(status)

    async def get_by_idempotency_key(self, key: str) -> tuple[Task, str | None] | None:
        rows = await self.run(_BY_KEY, {"b_key": key})
        if not rows:
            return None
        values = dict(rows[0])
        request_hash = values.pop("request_hash")
        return to_entity(Task, values), request_hash

    async def find(
        self, *, status: str | None, limit: int, offset: int = 0, cli: str | None = None
    ) -> list[Task]:
        """Newest first, from `offset`: the tasks in `status` of the agent CLI `cli` (None:
        any)."""
        equal = {"status": status, "cli": cli}
        params: dict[str, Any] = {f"b_{k}": v for k, v in equal.items() if v is not None}
        statement = _list_statement(frozenset(params))
        return await self.all(Task, statement, params | {"b_limit": limit, "b_offset": offset})

    async def page(
        self,
        *,
        equal: dict[str, str],
        text: str | None,
        after: Cursor | None,
        limit: int,
        window: int,
    ) -> tuple[list[Task], Cursor | None]:
        """Up to `limit` tasks, newest first, older than `after`: those whose columns equal
        `equal` (status, worker_id, context_id, agent_slug, cli) and, with `text`, whose prompt
        holds it (in any ASCII case) or whose id does (a shown short id is the id's tail).

        Under one equality or none, its index holds just those tasks: the page reads `limit`
        rows. Under more, or a text, it searches a window of the next `window` tasks, newest
        first (and the rest of the last one's millisecond), and no further; when the page is
        not filled and the listing goes on, the second value is where the search stopped (the
        window's last task): the next page searches on after it."""
        params: dict[str, Any] = {f"b_{name}": value for name, value in equal.items()}
        params["b_limit"] = limit
        if after is not None:
            params["b_at"], params["b_after_id"] = after.at, after.id
        if text is None and len(equal) <= 1:
            statement = _page_statement(frozenset(equal), after is not None)
            return await self.all(Task, statement, params), None
        if text is not None:
            literal = like_literal(text)
            params["b_contains"] = f"%{literal}%"
            params["b_id_part"] = f"%{literal.lower()}%"
        params["b_window"] = window
        end_at = await self.scalar(_window_end_statement(after is not None), params)
        if end_at is not None:
            params["b_end_at"] = end_at
        shape = (frozenset(equal), text is not None, after is not None, end_at is not None)
        found = await self.all(Task, _window_statement(self.kind, *shape), params)
        if len(found) >= limit or end_at is None:
            return found, None
        return found, Cursor(int(end_at), str(await self.scalar(_WINDOW_LAST, params)))

    async def oldest_queued_at(self) -> int | None:
        value = await self.scalar(_OLDEST_QUEUED)
        return None if value is None else int(value)

    async def transition(
        self,
        task_id: str,
        *,
        from_statuses: Collection[TaskStatus],
        lease_id: str | None = None,
        values: dict[str, Any],
    ) -> Task | None:
        """Compare-and-set: apply `values` (column: value) only if the task is in one of
        `from_statuses` and, when given, still holds `lease_id`. None if that no longer holds."""
        params = values | {"b_id": task_id}
        if lease_id is not None:
            params["b_lease"] = lease_id
        statuses = frozenset(str(s) for s in from_statuses)
        return await self.one(Task, _transition_statement(statuses, lease_id is not None), params)

    async def transition_several(
        self,
        fenced: list[tuple[str, str]],
        *,
        from_statuses: Collection[TaskStatus],
        values: dict[str, Any],
    ) -> dict[str, Task]:
        """`transition` of each (task, lease) pair with the same `values`; the tasks changed,
        by id (on PostgreSQL in one statement)."""
        if not self.is_postgres:
            moved = [
                await self.transition(
                    task_id, from_statuses=from_statuses, lease_id=lease_id, values=values
                )
                for task_id, lease_id in fenced
            ]
            return {task.id: task for task in moved if task is not None}
        params = values | {
            "b_ids": [task_id for task_id, _ in fenced],
            "b_leases": [lease_id for _, lease_id in fenced],
        }
        statuses = frozenset(str(s) for s in from_statuses)
        changed = await self.all(Task, _transition_several_statement(statuses), params)
        return {task.id: task for task in changed}

    async def lease_queued(
        self, task_id: str, *, lease_id: str, worker_id: str, now: int
    ) -> Task | None:
        """Compare-and-set a queued task to leased (one more attempt counted)."""
        params = {"b_id": task_id, "b_lease_id": lease_id, "b_worker": worker_id, "b_now": now}
        return await self.one(Task, LEASE_QUEUED, params)

    async def claim_next(
        self,
        *,
        worker_id: str,
        capacity: int,
        lease_id: str,
        now: int,
        sticky_cutoff: int,
        live_cutoff: int,
    ) -> Task | None:
        """Atomically take the best queued task `worker_id` may run, as leased under `lease_id`,
        unless the worker already holds `capacity` active leases.

        The caller must hold the worker's row lock (`WorkerRepository.check_in`): this statement
        then counts the worker's leases in a snapshot taken after every other grant to it
        committed. On PostgreSQL the candidate row is locked with SKIP LOCKED, so concurrent
        claimers never block on, or both take, the same task; SQLite serialises writers instead.
        """
        params = {
            "b_worker": worker_id,
            "b_capacity": capacity,
            "b_lease_id": lease_id,
            "b_now": now,
            "b_sticky_cutoff": sticky_cutoff,
            "b_live_cutoff": live_cutoff,
        }
        await self._walk_the_queue_index()
        return await self.one(Task, CLAIM, params)

    async def claim_granting(
        self,
        *,
        worker_id: str,
        capacity: int,
        lease_id: str,
        now: int,
        sticky_cutoff: int,
        live_cutoff: int,
        ttl_sec: int,
        window_ms: int,
        audit_id: str,
        detail_tail: str,
    ) -> Task | None:
        """PostgreSQL: `claim_next`, the lease and its audit entry written by the same
        statement (`CLAIM_GRANTING`); the caller builds them as the statement did."""
        params = {
            "b_worker": worker_id,
            "b_capacity": capacity,
            "b_lease_id": lease_id,
            "b_now": now,
            "b_sticky_cutoff": sticky_cutoff,
            "b_live_cutoff": live_cutoff,
            "b_ttl": ttl_sec,
            "b_window_ms": window_ms,
            "b_audit_ms": id_time(audit_id),
            "b_audit_tail": audit_id[13:],
            "b_detail_tail": detail_tail,
        }
        await self._walk_the_queue_index()
        return await self.one(Task, CLAIM_GRANTING, params)

    async def claim_several(
        self,
        *,
        worker_id: str,
        capacity: int,
        lease_ids: list[str],
        now: int,
        sticky_cutoff: int,
        live_cutoff: int,
    ) -> list[Task]:
        """`claim_next` for up to `len(lease_ids)` tasks, each leased under the next id, best
        first. On PostgreSQL one statement takes them all, never beyond the worker's free slots;
        on SQLite (a single writer) the caller keeps the count within them."""
        if not self.is_postgres or len(lease_ids) == 1:
            tasks: list[Task] = []
            for lease_id in lease_ids:
                task = await self.claim_next(
                    worker_id=worker_id,
                    capacity=capacity,
                    lease_id=lease_id,
                    now=now,
                    sticky_cutoff=sticky_cutoff,
                    live_cutoff=live_cutoff,
                )
                if task is None:
                    break
                tasks.append(task)
            return tasks
        params = {
            "b_worker": worker_id,
            "b_capacity": capacity,
            "b_limit": len(lease_ids),
            "b_lease_ids": lease_ids,
            "b_now": now,
            "b_sticky_cutoff": sticky_cutoff,
            "b_live_cutoff": live_cutoff,
        }
        await self._walk_the_queue_index()
        tasks = await self.all(Task, CLAIM_SEVERAL, params)
        return sorted(tasks, key=lambda task: (-task.priority, task.created_at, task.id))

    def walking(self) -> None:
        """`WALK_THE_QUEUE_INDEX` was set in this transaction by another statement (the
        worker's check-in: `WorkerRepository.check_in`)."""
        self._walking = self.is_postgres

    async def _walk_the_queue_index(self) -> None:
        if self.is_postgres and not self._walking:
            await self.run(WALK_THE_QUEUE_INDEX)
            self._walking = True
