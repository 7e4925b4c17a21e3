"""SQL for stalled runs: running attempts silent past their task's `stall_sec`, found, marked
(or stopped) and cleared when they print again (the reaper's and the events' side of a lease)."""

from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Integer, and_, bindparam, case, func, select, update

from bloom.db.repository import Repository, is_state, to_entity
from bloom.domain.models import Lease
from bloom.domain.stall import Stall
from bloom.domain.states import LeaseStatus
from bloom.runtime.storage.repositories.leases import ACTIVE, LEASE_COLUMNS
from bloom.runtime.storage.tables import leases, llm_tasks, task_event_totals

lz = leases
# Stalled runs (domain/stall.py says the same in Python): silent since the task's newest output
# if it came after the attempt reached its worker, else since it did; stalled once silent for
# longer than the task's stall_sec (else the runtime's default), unless that is 0.
tot = task_event_totals
_HANDED_OVER = func.coalesce(lz.c.claimed_at, lz.c.started_at)
_SILENT_SINCE = case((tot.c.last_at > _HANDED_OVER, tot.c.last_at), else_=_HANDED_OVER)
_STALL_SEC = func.coalesce(
    llm_tasks.c.policy["stall_sec"].as_integer(), bindparam("b_default", type_=Integer())
)
_STALLED = (
    select(*LEASE_COLUMNS, llm_tasks.c.policy, _SILENT_SINCE.label("silent_since"))
    .select_from(
        lz.join(
            llm_tasks, and_(llm_tasks.c.id == lz.c.task_id, llm_tasks.c.lease_id == lz.c.id)
        ).outerjoin(tot, tot.c.task_id == lz.c.task_id)
    )
    .where(
        ACTIVE,
        lz.c.stalled_at.is_(None),
        lz.c.expires_at >= bindparam("b_now", type_=BigInteger()),
        is_state(llm_tasks.c.status, "running"),
        _STALL_SEC > 0,
        bindparam("b_now", type_=BigInteger()) - _STALL_SEC * 1000 > _SILENT_SINCE,
    )
    .order_by(lz.c.started_at, lz.c.id)
    .limit(bindparam("b_limit"))
)
_LIVE_UNSTALLED = (
    lz.c.id == bindparam("b_id"),
    ACTIVE,
    lz.c.stalled_at.is_(None),
    lz.c.expires_at >= bindparam("b_now"),
)
_MARK_STALLED = (
    update(lz)
    .where(*_LIVE_UNSTALLED)
    .values(stalled_at=bindparam("b_now"))
    .returning(*LEASE_COLUMNS)
)
_STOP_STALLED = (
    update(lz)
    .where(*_LIVE_UNSTALLED)
    .values(
        stalled_at=bindparam("b_now"),
        status=LeaseStatus.FAILED.value,
        ended_at=bindparam("b_now"),
    )
    .returning(*LEASE_COLUMNS)
)
_UNSTALL = (
    update(lz)
    .where(lz.c.id == bindparam("b_id"), lz.c.stalled_at.is_not(None))
    .values(stalled_at=None)
)
_STALL_OF = (
    select(lz.c.id, lz.c.worker_id, lz.c.stalled_at, _SILENT_SINCE.label("silent_since"))
    .select_from(lz.outerjoin(tot, tot.c.task_id == lz.c.task_id))
    .where(lz.c.id == bindparam("b_id"), ACTIVE, lz.c.stalled_at.is_not(None))
)
_ACTIVE_AND_STALLED = select(func.count(), func.count(lz.c.stalled_at)).where(ACTIVE)


@dataclass(frozen=True, slots=True)
class Silent:
    """A running attempt silent past its task's `stall_sec`: its lease, its task's policy, and
    since when it has printed nothing (epoch ms)."""

    lease: Lease
    policy: dict[str, Any]
    since: int


class StallRepository(Repository):
    async def silent(self, now: int, default_stall_sec: int, limit: int) -> list[Silent]:
        """Live leases of running tasks, not yet found stalled, whose run has printed nothing for
        longer than its task's `stall_sec` (`default_stall_sec` when its policy has none)."""
        params = {"b_now": now, "b_default": default_stall_sec, "b_limit": limit}
        found = []
        for row in await self.run(_STALLED, params):
            values = dict(row)
            policy, since = values.pop("policy"), int(values.pop("silent_since"))
            found.append(Silent(to_entity(Lease, values), policy, since))
        return found

    async def mark_stalled(self, lease_id: str, now: int, *, stop: bool) -> Lease | None:
        """Compare-and-set: a live lease not yet found stalled is stalled since `now` (with
        `stop`, also ended as failed); None if it was not."""
        params = {"b_id": lease_id, "b_now": now}
        return await self.one(Lease, _STOP_STALLED if stop else _MARK_STALLED, params)

    async def unstall(self, lease_id: str) -> None:
        """The lease's run printed again: no longer stalled."""
        await self.run(_UNSTALL, {"b_id": lease_id})

    async def stall_of(self, lease_id: str) -> Stall | None:
        """The stall of an active lease found stalled, with since when it has been silent."""
        rows = await self.run(_STALL_OF, {"b_id": lease_id})
        if not rows:
            return None
        row = rows[0]
        return Stall(row["id"], row["worker_id"], row["stalled_at"], int(row["silent_since"]))

    async def active_and_stalled(self) -> tuple[int, int]:
        """(active leases, those of them found stalled)."""
        [(active, stalled)] = await self.rows(_ACTIVE_AND_STALLED)
        return int(active), int(stalled)
