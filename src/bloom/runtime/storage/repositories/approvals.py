"""SQL for approvals (`approvals`, docs/approvals.md): written with the complete of the attempt
that stopped at the call, decided once (a conditional update from `pending`), expired by the
keeper's loop."""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update

from bloom.db.repository import Repository, entity_columns, entity_values, to_entity
from bloom.domain.approvals import Approval, ApprovalStatus
from bloom.runtime.storage.tables import approvals

a = approvals
COLUMNS = entity_columns(a, Approval)
PENDING = ApprovalStatus.PENDING.value

_INSERT = insert(a)
_GET = select(*COLUMNS).where(a.c.id == bindparam("b_id"))
_BY_LEASE = select(*COLUMNS).where(a.c.lease_id == bindparam("b_lease"))
_DECIDE = (
    update(a)
    .where(a.c.id == bindparam("b_id"), a.c.status == PENDING)
    .values(
        status=bindparam("b_status"),
        decided_by=bindparam("b_by"),
        decided_at=bindparam("b_at"),
        note=bindparam("b_note"),
        remember=bindparam("b_remember"),
    )
    .returning(*COLUMNS)
)
_CLOSE_PENDING = (
    update(a)
    .where(a.c.task_id == bindparam("b_task"), a.c.status == PENDING)
    .values(
        status=ApprovalStatus.EXPIRED.value,
        decided_by=bindparam("b_by"),
        decided_at=bindparam("b_at"),
        note=bindparam("b_note"),
    )
    .returning(a.c.id)
)
_DUE = (
    select(*COLUMNS)
    .where(a.c.status == PENDING, a.c.expires_at <= bindparam("b_now"))
    .order_by(a.c.expires_at, a.c.id)
    .limit(bindparam("b_limit"))
)
_TO_NOTIFY = (
    select(*COLUMNS, a.c.notify_attempts)
    .where(a.c.notify_at <= bindparam("b_now"), a.c.status == PENDING)
    .order_by(a.c.notify_at, a.c.id)
    .limit(bindparam("b_limit"))
)
_NOTIFY_LATER = (
    update(a)
    .where(a.c.id == bindparam("b_id"))
    .values(notify_at=bindparam("b_at"), notify_attempts=bindparam("b_attempts"))
)
_TAKE = (
    update(a)
    .where(
        a.c.task_id == bindparam("b_task"),
        a.c.status != PENDING,
        a.c.applied_lease.is_(None),
    )
    .values(applied_lease=bindparam("b_lease"))
)
_PENDING_COUNT = select(func.count()).select_from(a).where(a.c.status == PENDING)
# What a resumed run applies: the task's decided calls (approved, denied, or expired: denied),
# and calls approved to be remembered in its context (any task of it).
_RULINGS = (
    select(*COLUMNS)
    .where(
        a.c.status != PENDING,
        (a.c.task_id == bindparam("b_task"))
        | ((a.c.context_id == bindparam("b_context")) & a.c.remember.is_(True)),
    )
    .order_by(a.c.requested_at, a.c.id)
    .limit(bindparam("b_limit"))
)


def _approval(row: Mapping[str, Any]) -> Approval:
    found = to_entity(Approval, row)
    return replace(found, remember=bool(found.remember))


def _listed(status: str | None, task_id: str | None) -> Any:
    query = select(*COLUMNS)
    if status is not None:
        query = query.where(a.c.status == status)
    if task_id is not None:
        query = query.where(a.c.task_id == task_id)
    return query.order_by(a.c.requested_at.desc(), a.c.id.desc()).limit(bindparam("b_limit"))


class ApprovalRepository(Repository):
    async def insert(self, approval: Approval) -> None:
        """A new approval, its webhook delivery due at once (sent where one is configured)."""
        await self.run(
            _INSERT, entity_values(approval, COLUMNS) | {"notify_at": approval.requested_at}
        )

    async def to_notify(self, now: int, limit: int) -> list[tuple[Approval, int]]:
        """Pending approvals whose webhook delivery is due, with the attempts made so far."""
        rows = await self.run(_TO_NOTIFY, {"b_now": now, "b_limit": limit})
        due = []
        for row in rows:
            values = dict(row)
            attempts = int(values.pop("notify_attempts"))
            due.append((_approval(values), attempts))
        return due

    async def notify_later(self, approval_id: str, at: int | None, attempts: int) -> None:
        """Its delivery done or given up (`at` None), or tried again at `at`."""
        await self.run(_NOTIFY_LATER, {"b_id": approval_id, "b_at": at, "b_attempts": attempts})

    async def get(self, approval_id: str) -> Approval | None:
        rows = await self.run(_GET, {"b_id": approval_id})
        return _approval(rows[0]) if rows else None

    async def of_lease(self, lease_id: str) -> Approval | None:
        rows = await self.run(_BY_LEASE, {"b_lease": lease_id})
        return _approval(rows[0]) if rows else None

    async def find(self, *, status: str | None, task_id: str | None, limit: int) -> list[Approval]:
        rows = await self.run(_listed(status, task_id), {"b_limit": limit})
        return [_approval(row) for row in rows]

    async def decide(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        by: str,
        at: int,
        note: str | None,
        remember: bool = False,
    ) -> Approval | None:
        """Decide a pending approval; None when it is not pending (decided, or expired)."""
        rows = await self.run(
            _DECIDE,
            {
                "b_id": approval_id,
                "b_status": status.value,
                "b_by": by,
                "b_at": at,
                "b_note": note,
                "b_remember": remember,
            },
        )
        return _approval(rows[0]) if rows else None

    async def close_pending(self, task_id: str, *, by: str, at: int, note: str) -> list[str]:
        """Expire the task's pending approvals (the task was cancelled); their ids."""
        rows = await self.run(
            _CLOSE_PENDING, {"b_task": task_id, "b_by": by, "b_at": at, "b_note": note}
        )
        return [str(row["id"]) for row in rows]

    async def due(self, now: int, limit: int) -> list[Approval]:
        """Pending approvals whose time ran out at `now`, the oldest first."""
        return [_approval(row) for row in await self.run(_DUE, {"b_now": now, "b_limit": limit})]

    async def pending_count(self) -> int:
        return int(await self.scalar(_PENDING_COUNT) or 0)

    async def take(self, task_id: str, lease_id: str) -> None:
        """The task's decisions not yet taken by a run, taken by the run of `lease_id`."""
        await self.run(_TAKE, {"b_task": task_id, "b_lease": lease_id})

    async def rulings(self, task_id: str, context_id: str, limit: int) -> list[Approval]:
        rows = await self.run(
            _RULINGS, {"b_task": task_id, "b_context": context_id, "b_limit": limit}
        )
        return [_approval(row) for row in rows]
