"""SQL for `leases`: grants, fenced renewals and endings, and the reaper's overdue leases
(stalled runs are `stalls.py`'s)."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql

from bloom.db.repository import (
    Repository,
    entity_columns,
    entity_values,
    is_state,
    text_rows,
    to_entity,
)
from bloom.domain.models import Lease, Task
from bloom.domain.states import LeaseStatus, TaskStatus
from bloom.runtime.storage.repositories.records import TASK_COLUMNS
from bloom.runtime.storage.tables import audit_logs, leases, llm_tasks

LEASE_COLUMNS = entity_columns(leases, Lease)
lz = leases
ACTIVE = is_state(lz.c.status, "active")

_GET = select(*LEASE_COLUMNS).where(lz.c.id == bindparam("b_id"))
_LIST = (
    select(*LEASE_COLUMNS)
    .order_by(lz.c.started_at.desc(), lz.c.id.desc())
    .limit(bindparam("b_limit"))
)
_LIST_BY_STATUS = _LIST.where(lz.c.status == bindparam("b_status"))
_OF_TASK = (
    select(*LEASE_COLUMNS)
    .where(lz.c.task_id == bindparam("b_task"))
    .order_by(lz.c.started_at, lz.c.id)
)
_COUNT_ACTIVE = select(func.count()).select_from(lz).where(ACTIVE)
_ACTIVE_FOR_WORKER = (
    select(*LEASE_COLUMNS)
    .where(lz.c.worker_id == bindparam("b_worker"), ACTIVE)
    .order_by(lz.c.started_at.desc())
)
_COUNT_ACTIVE_FOR_WORKER = select(func.count()).where(
    lz.c.worker_id == bindparam("b_worker"), ACTIVE
)
_ACTIVE_COUNTS = select(lz.c.worker_id, func.count()).where(ACTIVE).group_by(lz.c.worker_id)
_DELIVER_ASSIGNED = (
    update(lz)
    .where(
        lz.c.id
        == select(lz.c.id)
        .where(
            lz.c.worker_id == bindparam("b_worker"),
            ACTIVE,
            lz.c.claimed_at.is_(None),
            lz.c.expires_at >= bindparam("b_now"),
        )
        .order_by(lz.c.started_at)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery(),
        lz.c.claimed_at.is_(None),
    )
    .values(claimed_at=bindparam("b_now"))
    .returning(*LEASE_COLUMNS)
)
# Bound, not correlated: SQLite renders RETURNING without table names (see workers.py).
_TASK_STATE = {
    name: select(llm_tasks.c[name])
    .where(llm_tasks.c.id == bindparam("b_task"))
    .scalar_subquery()
    .label(f"task_{name}")
    for name in ("status", "cancel_requested")
}
_RENEW = (
    update(lz)
    .where(
        lz.c.id == bindparam("b_id"),
        lz.c.task_id == bindparam("b_task"),
        ACTIVE,
        lz.c.expires_at >= bindparam("b_now", type_=BigInteger()),
    )
    .values(
        last_heartbeat=bindparam("b_now"),
        expires_at=bindparam("b_now", type_=BigInteger()) + lz.c.ttl_seconds * 1000,
        claimed_at=func.coalesce(lz.c.claimed_at, bindparam("b_now")),
    )
    .returning(*LEASE_COLUMNS, *_TASK_STATE.values())
)
# PostgreSQL: a whole heartbeat in one statement, so it commits alone (no BEGIN, no COMMIT):
# `_RENEW` (held by the worker named, if one is), and on the first beat the task moved from
# leased to running, fenced by the lease, with its audit entry (the same words as
# `AttemptService.heartbeat`'s). Every row of the statement commits together, or none does.
_BEAT_NOW = bindparam("b_now", type_=BigInteger())
_BEAT_WORKER = bindparam("b_worker", type_=String())
_renewed = (
    update(lz)
    .where(
        lz.c.id == bindparam("b_id"),
        lz.c.task_id == bindparam("b_task"),
        ACTIVE,
        lz.c.expires_at >= _BEAT_NOW,
        or_(_BEAT_WORKER.is_(None), lz.c.worker_id == _BEAT_WORKER),
    )
    .values(
        last_heartbeat=_BEAT_NOW,
        expires_at=_BEAT_NOW + lz.c.ttl_seconds * 1000,
        claimed_at=func.coalesce(lz.c.claimed_at, _BEAT_NOW),
    )
    .returning(*LEASE_COLUMNS)
    .cte("renewed")
)
_started = (
    update(llm_tasks)
    .where(
        llm_tasks.c.id == _renewed.c.task_id,
        is_state(llm_tasks.c.status, "leased"),
        llm_tasks.c.lease_id == _renewed.c.id,
    )
    .values(status=TaskStatus.RUNNING.value, updated_at=_BEAT_NOW)
    .returning(llm_tasks.c.id, llm_tasks.c.cancel_requested)
    .cte("started")
)
_AUDIT_COLUMNS = ("id", "timestamp", "action", "entity_type", "entity_id", "actor", "detail")
_noted = (
    insert(audit_logs)
    .from_select(
        [*_AUDIT_COLUMNS, "task_id"],
        select(
            bindparam("b_audit_id", type_=String()),
            _BEAT_NOW,
            literal("task_running", String()),
            literal("llm_task", String()),
            _renewed.c.task_id,
            _renewed.c.worker_id,
            literal("Worker ", String())
            + _renewed.c.worker_id
            + literal(" started lease ", String())
            + _renewed.c.id,
            _renewed.c.task_id,
        ).select_from(_renewed.join(_started, _started.c.id == _renewed.c.task_id)),
    )
    .cte("noted")
)
_BEAT = (
    select(
        *(_renewed.c[column.name] for column in LEASE_COLUMNS),
        _started.c.id.is_not(None).label("started"),
        _TASK_STATE["status"],
        _TASK_STATE["cancel_requested"],
    )
    .select_from(_renewed.outerjoin(_started, true()))
    .add_cte(_noted)
)
_HOLD_FOR_DELIVERY = (
    update(lz)
    .where(
        lz.c.id == bindparam("b_id"),
        ACTIVE,
        lz.c.expires_at >= bindparam("b_now"),
        lz.c.expires_at < bindparam("b_until"),
    )
    .values(expires_at=bindparam("b_until"))
    .returning(*LEASE_COLUMNS)
)
_END = (
    update(lz)
    .where(lz.c.id == bindparam("b_id"), ACTIVE, lz.c.expires_at >= bindparam("b_now"))
    .values(status=bindparam("b_status"), ended_at=bindparam("b_now"))
    .returning(*LEASE_COLUMNS)
)
_EXPIRE = (
    update(lz)
    .where(lz.c.id == bindparam("b_id"), ACTIVE, lz.c.expires_at < bindparam("b_now"))
    .values(status=LeaseStatus.EXPIRED.value, ended_at=bindparam("b_now"))
    .returning(*LEASE_COLUMNS)
)
_END_ALL_FOR_WORKER = (
    update(lz)
    .where(lz.c.worker_id == bindparam("b_worker"), ACTIVE)
    .values(status=bindparam("b_status"), ended_at=bindparam("b_now"))
    .returning(*LEASE_COLUMNS)
)
_OVERDUE = (
    select(lz.c.id)
    .where(ACTIVE, lz.c.expires_at < bindparam("b_now"))
    .order_by(lz.c.expires_at)
    .limit(bindparam("b_limit"))
)
_LATEST_HOLDER = (
    select(lz.c.worker_id)
    .where(lz.c.context_id == bindparam("b_context"))
    .order_by(lz.c.started_at.desc(), lz.c.id.desc())
    .limit(1)
)
_FULL_TTL = bindparam("b_now", type_=BigInteger) + lz.c.ttl_seconds * 1000
_RENEW_ALL = (
    update(lz)
    .where(ACTIVE, lz.c.expires_at < _FULL_TTL)
    .values(expires_at=_FULL_TTL)
    .returning(lz.c.id)
)
_NEXT_EXPIRY = select(func.min(lz.c.expires_at)).where(ACTIVE)
_TASK_WITH_LEASE = (
    select(*TASK_COLUMNS, *[c.label(f"lease__{c.name}") for c in LEASE_COLUMNS])
    .select_from(
        llm_tasks.outerjoin(
            lz, lz.c.id == func.coalesce(bindparam("b_lease", type_=String()), llm_tasks.c.lease_id)
        )
    )
    .where(llm_tasks.c.id == bindparam("b_task"))
)

_NAMED = text_rows("named", task_id="b_tasks", lease_id="b_leases")
_TASKS_WITH_LEASES = (
    select(*TASK_COLUMNS, *[c.label(f"lease__{c.name}") for c in LEASE_COLUMNS])
    .select_from(
        _NAMED.join(llm_tasks, llm_tasks.c.id == _NAMED.c.task_id).outerjoin(
            lz, lz.c.id == func.coalesce(_NAMED.c.lease_id, llm_tasks.c.lease_id)
        )
    )
    .order_by(llm_tasks.c.id)
)
"""PostgreSQL: `_TASK_WITH_LEASE` for several tasks, each with the lease named beside it."""
_END_SEVERAL = (
    update(lz)
    .where(
        lz.c.id == func.any(bindparam("b_ids", type_=postgresql.ARRAY(String()))),
        ACTIVE,
        lz.c.expires_at >= bindparam("b_now"),
    )
    .values(status=bindparam("b_status"), ended_at=bindparam("b_now"))
    .returning(lz.c.id)
)
"""PostgreSQL: `_END` for several leases."""


@dataclass(frozen=True, slots=True)
class Renewal:
    """A renewed lease, with its task's state as of the renewal."""

    lease: Lease
    task_status: TaskStatus
    cancel_requested: bool


class LeaseRepository(Repository):
    async def insert(self, lease: Lease) -> None:
        self.append_row(leases, entity_values(lease, LEASE_COLUMNS))

    async def get(self, lease_id: str) -> Lease | None:
        return await self.one(Lease, _GET, {"b_id": lease_id})

    async def find(self, *, status: str | None, limit: int) -> list[Lease]:
        if status is None:
            return await self.all(Lease, _LIST, {"b_limit": limit})
        return await self.all(Lease, _LIST_BY_STATUS, {"b_limit": limit, "b_status": status})

    async def of_task(self, task_id: str) -> list[Lease]:
        """The task's leases (its attempts), oldest first."""
        return await self.all(Lease, _OF_TASK, {"b_task": task_id})

    async def count_active(self) -> int:
        return int(await self.scalar(_COUNT_ACTIVE))

    async def list_active_for_worker(self, worker_id: str) -> list[Lease]:
        return await self.all(Lease, _ACTIVE_FOR_WORKER, {"b_worker": worker_id})

    async def count_active_for_worker(self, worker_id: str) -> int:
        return int(await self.scalar(_COUNT_ACTIVE_FOR_WORKER, {"b_worker": worker_id}))

    async def active_counts(self) -> dict[str, int]:
        return {worker_id: count for worker_id, count in await self.rows(_ACTIVE_COUNTS)}

    async def task_with_lease(
        self, task_id: str, lease_id: str | None
    ) -> tuple[Task, Lease | None] | None:
        """The task and the lease named (default: the task's current one) if that exists,
        whatever task it belongs to, in one read."""
        rows = await self.run(_TASK_WITH_LEASE, {"b_task": task_id, "b_lease": lease_id})
        return _task_and_lease(rows[0]) if rows else None

    async def tasks_with_leases(
        self, named: list[tuple[str, str | None]]
    ) -> dict[str, tuple[Task, Lease | None]]:
        """`task_with_lease` for each (task, lease) pair, by task id (unknown tasks left out);
        on PostgreSQL in one read."""
        if not self.is_postgres:
            found = {
                task_id: await self.task_with_lease(task_id, lease_id)
                for task_id, lease_id in named
            }
            return {task_id: pair for task_id, pair in found.items() if pair is not None}
        params = {"b_tasks": [task for task, _ in named], "b_leases": [lease for _, lease in named]}
        pairs = [_task_and_lease(row) for row in await self.run(_TASKS_WITH_LEASES, params)]
        return {task.id: (task, lease) for task, lease in pairs}

    async def deliver_assigned(self, worker_id: str, now: int) -> Lease | None:
        """Mark the oldest lease granted to `worker_id` but not yet handed to it as delivered."""
        return await self.one(Lease, _DELIVER_ASSIGNED, {"b_worker": worker_id, "b_now": now})

    async def renew(self, lease_id: str, task_id: str, now: int) -> Renewal | None:
        """Extend a live lease of `task_id` by its TTL. An expired lease stays dead even before
        the reaper has seen it: a late heartbeat never revives it."""
        params = {"b_id": lease_id, "b_task": task_id, "b_now": now}
        rows = await self.run(_RENEW, params)
        if not rows:
            return None
        values = dict(rows[0])
        task_status = TaskStatus(values.pop("task_status"))
        cancel_requested = bool(values.pop("task_cancel_requested"))
        return Renewal(to_entity(Lease, values), task_status, cancel_requested)

    async def beat(
        self, lease_id: str, task_id: str, worker_id: str | None, now: int, audit_id: str
    ) -> tuple[Renewal, bool] | None:
        """PostgreSQL: a heartbeat in one statement (`_BEAT`), to run outside a transaction: the
        live lease of `task_id` (held by `worker_id`, when given) renewed, and its task moved
        from leased to running with an audit entry of id `audit_id` if it was leased. The
        renewal and whether the task started; None when the lease is not live (nothing is
        written then)."""
        params = {
            "b_id": lease_id,
            "b_task": task_id,
            "b_worker": worker_id,
            "b_now": now,
            "b_audit_id": audit_id,
        }
        rows = await self.run(_BEAT, params)
        if not rows:
            return None
        values = dict(rows[0])
        started = bool(values.pop("started"))
        task_status = TaskStatus(values.pop("task_status"))
        status = TaskStatus.RUNNING if started else task_status
        cancel_requested = bool(values.pop("task_cancel_requested"))
        return Renewal(to_entity(Lease, values), status, cancel_requested), started

    async def hold_for_delivery(self, lease_id: str, now: int, until: int) -> Lease | None:
        """Push a live lease's expiry out to `until` (never nearer); None if it has lapsed."""
        params = {"b_id": lease_id, "b_now": now, "b_until": until}
        lease = await self.one(Lease, _HOLD_FOR_DELIVERY, params)
        return lease if lease is not None else await self._live(lease_id, now)

    async def _live(self, lease_id: str, now: int) -> Lease | None:
        lease = await self.get(lease_id)
        live = lease is not None and lease.status is LeaseStatus.ACTIVE and lease.expires_at >= now
        return lease if live else None

    async def end(self, lease_id: str, status: LeaseStatus, now: int) -> Lease | None:
        """Compare-and-set a live (active, not overdue) lease to `status`; None if it was not."""
        return await self.one(
            Lease, _END, {"b_id": lease_id, "b_status": str(status), "b_now": now}
        )

    async def end_several(self, lease_ids: list[str], status: LeaseStatus, now: int) -> set[str]:
        """`end` for each lease; the ids of those it ended (on PostgreSQL in one statement)."""
        if not self.is_postgres:
            return {lease_id for lease_id in lease_ids if await self.end(lease_id, status, now)}
        params = {"b_ids": lease_ids, "b_status": str(status), "b_now": now}
        return {row["id"] for row in await self.run(_END_SEVERAL, params)}

    async def expire(self, lease_id: str, now: int) -> Lease | None:
        """The reaper's compare-and-set: an active lease past its expiry becomes expired."""
        return await self.one(Lease, _EXPIRE, {"b_id": lease_id, "b_now": now})

    async def end_all_for_worker(
        self, worker_id: str, status: LeaseStatus, now: int
    ) -> list[Lease]:
        params = {"b_worker": worker_id, "b_status": str(status), "b_now": now}
        return await self.all(Lease, _END_ALL_FOR_WORKER, params)

    async def overdue_ids(self, now: int, limit: int) -> list[str]:
        return [row["id"] for row in await self.run(_OVERDUE, {"b_now": now, "b_limit": limit})]

    async def renew_all(self, now: int) -> int:
        """Give every active lease at least its full TTL from `now`; how many were extended."""
        return len(await self.run(_RENEW_ALL, {"b_now": now}))

    async def next_expiry(self) -> int | None:
        value = await self.scalar(_NEXT_EXPIRY)
        return int(value) if value is not None else None

    async def latest_worker_for_context(self, context_id: str) -> str | None:
        """The worker that holds, or most recently held, `context_id`."""
        holder: str | None = await self.scalar(_LATEST_HOLDER, {"b_context": context_id})
        return holder


def _task_and_lease(row: Mapping[str, Any]) -> tuple[Task, Lease | None]:
    values = dict(row)
    lease_values = {key[7:]: values.pop(key) for key in list(values) if key.startswith("lease__")}
    lease = to_entity(Lease, lease_values) if lease_values["id"] is not None else None
    return to_entity(Task, values), lease
