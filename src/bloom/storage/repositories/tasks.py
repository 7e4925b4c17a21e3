"""SQL for `llm_tasks`: inserts, compare-and-set transitions and the claim query."""

from collections.abc import Collection
from typing import Any

from sqlalchemy import exists, func, insert, or_, select, update

from bloom.domain.models import Task
from bloom.domain.states import TaskStatus
from bloom.storage.repositories.base import Repository, entity_columns, is_state, to_entity
from bloom.storage.tables import leases, llm_tasks, workers

TASK_COLUMNS = entity_columns(llm_tasks, Task)


class TaskRepository(Repository):
    async def insert(self, task: Task, request_hash: str | None = None) -> Task | None:
        """Insert `task`; None when its idempotency key is already taken."""
        values = _task_values(task) | {"request_hash": request_hash}
        if task.idempotency_key is None:
            await self.conn.execute(insert(llm_tasks).values(values))
            return task
        stmt = (
            self.dialect_insert(llm_tasks)
            .values(values)
            .on_conflict_do_nothing(index_elements=[llm_tasks.c.idempotency_key])
            .returning(*TASK_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Task, row) if row else None

    async def get(self, task_id: str) -> Task | None:
        row = (
            await self.conn.execute(select(*TASK_COLUMNS).where(llm_tasks.c.id == task_id))
        ).first()
        return to_entity(Task, row) if row else None

    async def get_by_idempotency_key(self, key: str) -> tuple[Task, str | None] | None:
        stmt = select(*TASK_COLUMNS, llm_tasks.c.request_hash).where(
            llm_tasks.c.idempotency_key == key
        )
        row = (await self.conn.execute(stmt)).first()
        if row is None:
            return None
        values = dict(row._mapping)
        request_hash = values.pop("request_hash")
        return Task(**values), request_hash

    async def find(self, *, status: str | None, limit: int, offset: int = 0) -> list[Task]:
        stmt = select(*TASK_COLUMNS)
        if status is not None:
            stmt = stmt.where(llm_tasks.c.status == status)
        stmt = stmt.order_by(llm_tasks.c.created_at.desc(), llm_tasks.c.id.desc())
        rows = await self.conn.execute(stmt.limit(limit).offset(offset))
        return [to_entity(Task, row) for row in rows]

    async def count_by_status(self) -> dict[str, int]:
        stmt = select(llm_tasks.c.status, func.count()).group_by(llm_tasks.c.status)
        return {status: count for status, count in await self.conn.execute(stmt)}

    async def transition(
        self,
        task_id: str,
        *,
        from_statuses: Collection[TaskStatus],
        lease_id: str | None = None,
        values: dict[str, Any],
    ) -> Task | None:
        """Compare-and-set: apply `values` only if the task is in one of `from_statuses`
        (and still holds `lease_id`, when given). None when the condition no longer holds."""
        stmt = update(llm_tasks).where(
            llm_tasks.c.id == task_id, llm_tasks.c.status.in_([str(s) for s in from_statuses])
        )
        if lease_id is not None:
            stmt = stmt.where(llm_tasks.c.lease_id == lease_id)
        row = (await self.conn.execute(stmt.values(values).returning(*TASK_COLUMNS))).first()
        return to_entity(Task, row) if row else None

    async def claim_next(
        self,
        *,
        worker_id: str,
        now: int,
        sticky_cutoff: int,
        live_cutoff: int,
        values: dict[str, Any],
    ) -> Task | None:
        """Atomically take the best queued task `worker_id` may run and apply `values` to it.

        Order: priority, then age. A task whose context is sticky to another worker is left to
        that worker while it is live and has a free slot, for at most the sticky wait.
        On PostgreSQL the candidate row is locked with SKIP LOCKED, so concurrent claimers never
        block on, or both take, the same task; SQLite serialises writers instead.
        """
        owner = workers.alias("owner")
        owner_load = (
            select(func.count())
            .select_from(leases)
            .where(leases.c.worker_id == owner.c.id, is_state(leases.c.status, "active"))
            .scalar_subquery()
        )
        owner_can_take = exists().where(
            owner.c.id == llm_tasks.c.preferred_worker_id,
            is_state(owner.c.status, "online"),
            owner.c.last_heartbeat >= live_cutoff,
            owner_load < owner.c.capabilities["max_concurrency"].as_integer(),
        )
        candidate = (
            select(llm_tasks.c.id)
            .where(
                is_state(llm_tasks.c.status, "queued"),
                or_(llm_tasks.c.not_before.is_(None), llm_tasks.c.not_before <= now),
                or_(
                    llm_tasks.c.preferred_worker_id.is_(None),
                    llm_tasks.c.preferred_worker_id == worker_id,
                    llm_tasks.c.queued_at < sticky_cutoff,
                    ~owner_can_take,
                ),
            )
            .order_by(llm_tasks.c.priority.desc(), llm_tasks.c.created_at, llm_tasks.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        stmt = (
            update(llm_tasks)
            .where(
                llm_tasks.c.id == candidate.scalar_subquery(),
                is_state(llm_tasks.c.status, "queued"),
            )
            .values(values)
            .returning(*TASK_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Task, row) if row else None

    async def prefer_worker_for_context(self, context_id: str, worker_id: str, now: int) -> None:
        """Route the context's other queued tasks to the worker that now holds the context."""
        await self.conn.execute(
            update(llm_tasks)
            .where(is_state(llm_tasks.c.status, "queued"), llm_tasks.c.context_id == context_id)
            .where(
                or_(
                    llm_tasks.c.preferred_worker_id.is_(None),
                    llm_tasks.c.preferred_worker_id != worker_id,
                )
            )
            .values(preferred_worker_id=worker_id, updated_at=now)
        )


def _task_values(task: Task) -> dict[str, Any]:
    return {column.name: getattr(task, column.name) for column in TASK_COLUMNS}
