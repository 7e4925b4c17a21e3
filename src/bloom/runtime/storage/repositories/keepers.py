"""Who a queued task is kept for, and so whom a wake-up must reach.

A context's next task is kept, for at most the sticky wait, for the worker that held the
context's newest lease (its Claude conversation lives there), while that worker is online, live,
ready, not paused, has a free slot and has the task's CLI (`has_cli`): its keeper. The claim
query passes such a task over for everyone else (`tasks._claim_candidates`); the wake-ups for
new and ready work name the keeper, so that its waiting claim hears of the task at once, and
wake a counted claim only for a task nobody keeps (a counted claim woken for a kept task would
find nothing, and the keeper nothing to wake it).
"""

from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Table,
    Text,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    true,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from bloom.db.repository import Repository, is_state
from bloom.domain.clis import DEFAULT_CLI
from bloom.runtime.storage.tables import budgets, leases, llm_tasks, workers

t = llm_tasks


def context_owner(tasks: Table) -> Any:
    """The worker of the newest lease of the task's context (correlated to `tasks`)."""
    held = leases.alias("held")
    return (
        select(held.c.worker_id)
        .where(held.c.context_id == tasks.c.context_id)
        .order_by(held.c.started_at.desc(), held.c.id.desc())
        .limit(1)
        .correlate(tasks)
        .scalar_subquery()
    )


def context_owner_named() -> Any:
    """The worker of the newest lease of the context `b_context`."""
    held = leases.alias("held")
    return (
        select(held.c.worker_id)
        .where(held.c.context_id == bindparam("b_context"))
        .order_by(held.c.started_at.desc(), held.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


class _reports_cli(FunctionElement[bool]):
    """Whether a worker's capabilities list a CLI in `clis` (an object of names: versions)."""

    type = Boolean()
    inherit_cache = True
    name = "reports_cli"


@compiles(_reports_cli, "postgresql")
def _reports_cli_pg(element: _reports_cli, compiler: SQLCompiler, **kw: Any) -> str:
    capabilities, cli = (compiler.process(c, **kw) for c in element.clauses)
    return f"(({capabilities} -> 'clis' -> {cli}) IS NOT NULL)"


@compiles(_reports_cli, "sqlite")
def _reports_cli_sqlite(element: _reports_cli, compiler: SQLCompiler, **kw: Any) -> str:
    capabilities, cli = (compiler.process(c, **kw) for c in element.clauses)
    return f"(json_type({capabilities}, '$.clis.' || {cli}) IS NOT NULL)"


def has_cli(worker: Any, cli: Any) -> ColumnElement[bool]:
    """`worker` (an alias of workers) can run the agent CLI `cli` (a task's column, or a
    parameter): its capabilities' `clis` name it, or it reports no `clis` (an older worker, a
    node agent of the reference) and `cli` is Claude."""
    capabilities = worker.c.capabilities
    if isinstance(cli, str):
        named = _reports_cli(capabilities, literal(cli, Text))
        return or_(_lists_no_clis(capabilities), named) if cli == DEFAULT_CLI else named
    return or_(
        and_(cli == DEFAULT_CLI, _lists_no_clis(capabilities)), _reports_cli(capabilities, cli)
    )


class _lists_no_clis(FunctionElement[bool]):
    type = Boolean()
    inherit_cache = True
    name = "lists_no_clis"


@compiles(_lists_no_clis, "postgresql")
def _lists_no_clis_pg(element: _lists_no_clis, compiler: SQLCompiler, **kw: Any) -> str:
    (capabilities,) = (compiler.process(c, **kw) for c in element.clauses)
    return f"(({capabilities} -> 'clis') IS NULL)"


@compiles(_lists_no_clis, "sqlite")
def _lists_no_clis_sqlite(element: _lists_no_clis, compiler: SQLCompiler, **kw: Any) -> str:
    (capabilities,) = (compiler.process(c, **kw) for c in element.clauses)
    return f"(json_type({capabilities}, '$.clis') IS NULL)"


def may_keep(owner: Any) -> list[ColumnElement[bool]]:
    """`owner` (an alias of workers) can take its context's next task now: online, seen since
    `b_live_cutoff`, ready, not paused at `b_now`, a slot free."""
    load = (
        select(func.count())
        .select_from(leases)
        .where(leases.c.worker_id == owner.c.id, is_state(leases.c.status, "active"))
        .correlate(owner)
        .scalar_subquery()
    )
    return [
        is_state(owner.c.status, "online"),
        owner.c.last_heartbeat >= bindparam("b_live_cutoff"),
        func.coalesce(owner.c.capabilities["ready"].as_boolean(), true()).is_(true()),
        or_(owner.c.paused_until.is_(None), owner.c.paused_until <= bindparam("b_now")),
        load < owner.c.capabilities["max_concurrency"].as_integer(),
    ]


def queued_now() -> list[ColumnElement[bool]]:
    """The task is queued and past its backoff at `b_now`."""
    return [
        is_state(t.c.status, "queued"),
        or_(t.c.not_before.is_(None), t.c.not_before <= bindparam("b_now")),
    ]


def ready_now() -> list[ColumnElement[bool]]:
    """The task is queued, past its backoff at `b_now`, of a project whose budget is not held,
    and (with a workspace) no other task of its branch is in flight: some claim may take it."""
    return [
        *queued_now(),
        t.c.agent_slug.not_in(
            select(budgets.c.project).where(budgets.c.held_until > bindparam("b_now"))
        ),
        or_(t.c.workspace_key.is_(None), ~branch_in_flight(t)),
    ]


def branch_in_flight(tasks: Any) -> ColumnElement[bool]:
    """Another task of the same repository branch as `tasks` is leased or running."""
    busy = t.alias("busy")
    return exists().where(
        busy.c.workspace_key == tasks.c.workspace_key,
        or_(is_state(busy.c.status, "leased"), is_state(busy.c.status, "running")),
        busy.c.id != tasks.c.id,
    )


def _keepers(*where: ColumnElement[bool]) -> Any:
    """Each ready task's keeper (NULL: nobody keeps it), best task first, up to `b_limit`."""
    owner = workers.alias("owner")
    keeper = (
        select(owner.c.id)
        .where(owner.c.id == context_owner(t), *may_keep(owner), has_cli(owner, t.c.cli))
        .correlate(t)
        .scalar_subquery()
    )
    kept = case((t.c.queued_at >= bindparam("b_sticky_cutoff"), keeper), else_=None)
    return (
        select(kept.label("keeper"))
        .where(*ready_now(), *where)
        .order_by(t.c.priority.desc(), t.c.created_at, t.c.id)
        .limit(bindparam("b_limit"))
    )


def keeper_named() -> tuple[Any, Any]:
    """(held, keeper) of a task about to be queued now, of context `b_context`, agent
    `b_agent` and CLI `b_cli`, not yet in the table (`_keepers` for a fresh task: queued, no
    backoff, within the sticky wait): whether its project's budget is held (then it is not
    ready, and wakes nobody), and its keeper (NULL: nobody keeps it)."""
    owner = workers.alias("owner")
    keeper = (
        select(owner.c.id)
        .where(
            owner.c.id == context_owner_named(),
            *may_keep(owner),
            has_cli(owner, bindparam("b_cli", type_=Text)),
        )
        .scalar_subquery()
    )
    held = (
        select(budgets.c.project)
        .where(budgets.c.project == bindparam("b_agent"), budgets.c.held_until > bindparam("b_now"))
        .exists()
    )
    return held, keeper


_READY_KEEPERS = _keepers()
_KEEPER_OF = _keepers(t.c.id == bindparam("b_id"))
_UNDELIVERED_TO = (
    select(leases.c.worker_id)
    .where(is_state(leases.c.status, "active"), leases.c.claimed_at.is_(None))
    .distinct()
    .limit(bindparam("b_limit"))
)


class KeeperRepository(Repository):
    async def of_tasks(
        self, task_ids: list[str], *, now: int, sticky_cutoff: int, live_cutoff: int
    ) -> list[str | None]:
        """The keeper of each of these tasks that is ready (None: nobody keeps it)."""
        params = {
            "b_now": now,
            "b_sticky_cutoff": sticky_cutoff,
            "b_live_cutoff": live_cutoff,
            "b_limit": 1,
        }
        keepers: list[str | None] = []
        for task_id in task_ids:
            keepers += [
                row["keeper"] for row in await self.run(_KEEPER_OF, params | {"b_id": task_id})
            ]
        return keepers

    async def of_ready(
        self, *, now: int, sticky_cutoff: int, live_cutoff: int, limit: int
    ) -> list[str | None]:
        """The keeper of each of the best `limit` ready tasks (None: nobody keeps it)."""
        params = {
            "b_now": now,
            "b_sticky_cutoff": sticky_cutoff,
            "b_live_cutoff": live_cutoff,
            "b_limit": limit,
        }
        return [row["keeper"] for row in await self.run(_READY_KEEPERS, params)]

    async def awaiting_delivery(self, limit: int) -> list[str]:
        """Workers a lease was granted to that no claim of theirs has delivered yet."""
        return [row["worker_id"] for row in await self.run(_UNDELIVERED_TO, {"b_limit": limit})]
