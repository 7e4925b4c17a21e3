"""SQL of a claim on `llm_tasks`: the queued tasks a worker may take, best first, and the
statements that lease them (one; several; one with its grant written in the same statement),
the seed's push-style lease of a named task, and the plan setting a claim's transaction walks
the queue's index with."""

from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql

from bloom.db.repository import is_state
from bloom.domain.clis import DEFAULT_CLI
from bloom.domain.states import TaskStatus
from bloom.runtime.storage.repositories.keepers import context_owner, has_cli, may_keep, ready_now
from bloom.runtime.storage.repositories.records import TASK_COLUMNS
from bloom.runtime.storage.tables import audit_logs, leases, llm_tasks, workers

t = llm_tasks

_LEASED_VALUES = {
    "status": TaskStatus.LEASED.value,
    "attempts": t.c.attempts + 1,
    "lease_id": bindparam("b_lease_id"),
    "worker_id": bindparam("b_worker"),
    "updated_at": bindparam("b_now"),
}
LEASE_QUEUED = (
    update(t)
    .where(t.c.id == bindparam("b_id"), is_state(t.c.status, "queued"))
    .values(_LEASED_VALUES)
    .returning(*TASK_COLUMNS)
)


def _claim_candidates() -> tuple[Any, Any]:
    """The queued tasks a worker may take, best first, locked as read (skipping locked ones),
    while it holds fewer active leases than `b_capacity`; and the count of those it holds.

    Order: priority, then age. A project whose budget is spent (`budgets.held_until` in the
    future) has its tasks passed over. A task with a workspace goes only to a worker that says
    it serves them (its capability `workspaces`); any task only to a worker that has its CLI
    (`has_cli`: its capability `clis`, or Claude for a worker that reports none). A task whose
    context was last held by another worker is left to that worker (its Claude conversation
    lives there) while it may keep it (`keepers`: online, live, ready, a slot free, its CLI),
    for at most the sticky wait; after that, anyone may.
    """
    owner = workers.alias("owner")
    owner_takes_it = exists().where(
        owner.c.id == context_owner(t),
        owner.c.id != bindparam("b_worker"),
        *may_keep(owner),
        has_cli(owner, t.c.cli),
    )
    my_load = (
        select(func.count())
        .select_from(leases)
        .where(leases.c.worker_id == bindparam("b_worker"), is_state(leases.c.status, "active"))
        .scalar_subquery()
    )
    me = workers.alias("me")
    serves_workspaces = exists().where(
        me.c.id == bindparam("b_worker"), me.c.capabilities["workspaces"].as_boolean().is_(true())
    )
    # Claude's tasks (most) against one look at the worker, made once; another CLI's per task.
    has_claude = exists().where(me.c.id == bindparam("b_worker"), has_cli(me, DEFAULT_CLI))
    mine = workers.alias("mine")
    has_its_cli = exists().where(mine.c.id == bindparam("b_worker"), has_cli(mine, t.c.cli))
    candidates = (
        select(t.c.id)
        .where(
            my_load < bindparam("b_capacity"),
            *ready_now(),
            or_(t.c.queued_at < bindparam("b_sticky_cutoff"), ~owner_takes_it),
            or_(t.c.workspace_key.is_(None), serves_workspaces),
            or_(
                and_(t.c.cli == DEFAULT_CLI, has_claude), and_(t.c.cli != DEFAULT_CLI, has_its_cli)
            ),
        )
        .order_by(t.c.priority.desc(), t.c.created_at, t.c.id)
        .with_for_update(skip_locked=True)
    )
    return candidates, my_load


def _claim_statement() -> Any:
    """Lease the best queued task a worker may take (`_claim_candidates`)."""
    candidate = _claim_candidates()[0].limit(1).scalar_subquery()
    return (
        update(t)
        .where(t.c.id == candidate, is_state(t.c.status, "queued"))
        .values(_LEASED_VALUES)
        .returning(*TASK_COLUMNS)
    )


def _claim_several_statement() -> Any:
    """PostgreSQL: lease up to `b_limit` of the best queued tasks, never more than the worker's
    free slots, in one statement; each under the next of `b_lease_ids`."""
    candidates, my_load = _claim_candidates()
    free = func.greatest(0, func.least(bindparam("b_limit"), bindparam("b_capacity") - my_load))
    picked = candidates.limit(free).subquery("candidate")
    numbered = select(picked.c.id, func.row_number().over().label("n")).subquery("numbered")
    ids = (
        func.unnest(bindparam("b_lease_ids", type_=postgresql.ARRAY(String())))
        .table_valued("lease_id", with_ordinality="n")
        .render_derived("ids", with_types=False)
    )
    # Taken once (a CTE made to be materialised): a subquery joined to the ids could be run
    # again for each of them, and number its rows differently each time.
    paired = (
        select(numbered.c.id, ids.c.lease_id)
        .join_from(numbered, ids, numbered.c.n == ids.c.n)
        .cte("paired")
        .prefix_with("MATERIALIZED")
    )
    return (
        update(t)
        .where(t.c.id == paired.c.id, is_state(t.c.status, "queued"))
        .values(_LEASED_VALUES | {"lease_id": paired.c.lease_id})
        .returning(*TASK_COLUMNS)
    )


def _claim_granting_statement() -> Any:
    """PostgreSQL: `_claim_statement` with its grant written in the same statement, as CTEs on
    the claimed row: the lease (granted at the later of `b_now` and the task's queueing, short
    until acknowledged: `b_window_ms`) and its `task_leased` audit entry (its id: an id made
    before, `b_audit_ms` and `b_audit_tail`, moved to the grant's time if later: `retimed`; its
    detail `Task <id>` and `b_detail_tail`). What
    `LeaseService._record_grant` appends otherwise: a round trip less."""
    claimed = _claim_statement().cte("claimed")
    granted_at = func.greatest(
        bindparam("b_now", type_=BigInteger()),
        func.coalesce(claimed.c.queued_at, claimed.c.created_at),
    )
    worker = bindparam("b_worker", type_=String())
    lease = insert(leases).from_select(
        [
            "id",
            "task_id",
            "worker_id",
            "started_at",
            "expires_at",
            "ttl_seconds",
            "status",
            "last_heartbeat",
            "context_id",
            "claimed_at",
        ],
        select(
            claimed.c.lease_id,
            claimed.c.id,
            worker,
            granted_at,
            granted_at + bindparam("b_window_ms", type_=BigInteger()),
            bindparam("b_ttl", type_=Integer()),
            literal("active", String()),
            granted_at,
            claimed.c.context_id,
            granted_at,
        ).select_from(claimed),
    )
    audit_at = func.greatest(granted_at, bindparam("b_audit_ms", type_=BigInteger()))
    hexed = func.lpad(func.to_hex(audit_at), 12, literal("0", String()))
    audit_id = (
        func.substr(hexed, 1, 8)
        + literal("-", String())
        + func.substr(hexed, 9, 4)
        + bindparam("b_audit_tail", type_=String())
    )
    noted = insert(audit_logs).from_select(
        ["id", "timestamp", "action", "entity_type", "entity_id", "actor", "detail", "task_id"],
        select(
            audit_id,
            granted_at,
            literal("task_leased", String()),
            literal("lease", String()),
            claimed.c.lease_id,
            worker,
            literal("Task ", String()) + claimed.c.id + bindparam("b_detail_tail", type_=String()),
            claimed.c.id,
        ).select_from(claimed),
    )
    return select(*(claimed.c[column.name] for column in TASK_COLUMNS)).add_cte(
        lease.cte("granted"), noted.cte("noted")
    )


CLAIM = _claim_statement()
CLAIM_GRANTING = _claim_granting_statement()
CLAIM_SEVERAL = _claim_several_statement()
WALKING = func.concat(
    func.set_config("enable_sort", "off", True), func.set_config("jit", "off", True)
).label("walking")
"""PostgreSQL, for the rest of the claim's transaction: no plan that sorts. A burst of creates
into a small table leaves its statistics saying "a few rows" until autoanalyze comes (up to a
minute later); the planner then reads every queued row, runs the context test on each and sorts
them (20-50 ms a claim at 4,000 queued), where walking `ix_llm_tasks_queue` in order stops at the
first row it may take. With sorting priced out, only that walk is left. (A generic plan, made
once, would save the claim's planning, 0.27 ms; but the one PostgreSQL made took 54 ms a claim
at 100,000 queued, so each claim is planned for its values: docs/decisions.md.)

And no JIT compilation: a statement of the same transaction that must sort (a grant's
dependency answers, in the order the task named them) is still planned with a sort, now priced
at `disable_cost` (10^10), far past `jit_above_cost`, so PostgreSQL would compile it to machine
code first: 160-220 ms for a 15 ms read (a fan-in of 500's grant, docs/benchmarks.md)."""
WALK_THE_QUEUE_INDEX = select(WALKING)
