"""SQL for `leases`: grants, fenced renewals and endings, and the reaper's queries."""

from sqlalchemy import BigInteger, func, insert, literal, select, update

from bloom.domain.models import Lease
from bloom.domain.states import LeaseStatus
from bloom.storage.repositories.base import Repository, entity_columns, is_state, to_entity
from bloom.storage.tables import leases

LEASE_COLUMNS = entity_columns(leases, Lease)


class LeaseRepository(Repository):
    async def insert(self, lease: Lease) -> None:
        values = {column.name: getattr(lease, column.name) for column in LEASE_COLUMNS}
        await self.conn.execute(insert(leases).values(values))

    async def get(self, lease_id: str) -> Lease | None:
        row = (
            await self.conn.execute(select(*LEASE_COLUMNS).where(leases.c.id == lease_id))
        ).first()
        return to_entity(Lease, row) if row else None

    async def find(self, *, status: str | None, limit: int) -> list[Lease]:
        stmt = select(*LEASE_COLUMNS)
        if status is not None:
            stmt = stmt.where(leases.c.status == status)
        stmt = stmt.order_by(leases.c.started_at.desc(), leases.c.id.desc()).limit(limit)
        return [to_entity(Lease, row) for row in await self.conn.execute(stmt)]

    async def list_active_for_worker(self, worker_id: str) -> list[Lease]:
        stmt = (
            select(*LEASE_COLUMNS)
            .where(leases.c.worker_id == worker_id, is_state(leases.c.status, "active"))
            .order_by(leases.c.started_at.desc())
        )
        return [to_entity(Lease, row) for row in await self.conn.execute(stmt)]

    async def count_active_for_worker(self, worker_id: str) -> int:
        stmt = select(func.count()).where(
            leases.c.worker_id == worker_id, is_state(leases.c.status, "active")
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def active_counts(self) -> dict[str, int]:
        stmt = (
            select(leases.c.worker_id, func.count())
            .where(is_state(leases.c.status, "active"))
            .group_by(leases.c.worker_id)
        )
        return {worker_id: count for worker_id, count in await self.conn.execute(stmt)}

    async def totals(self) -> tuple[int, int]:
        """(all leases, active leases)."""
        active = func.count().filter(is_state(leases.c.status, "active"))
        row = (await self.conn.execute(select(func.count(), active))).one()
        return int(row[0]), int(row[1] or 0)

    async def deliver_assigned(self, worker_id: str, now: int) -> Lease | None:
        """Mark the oldest lease granted to `worker_id` but not yet handed to it as delivered."""
        pending = (
            select(leases.c.id)
            .where(
                leases.c.worker_id == worker_id,
                is_state(leases.c.status, "active"),
                leases.c.claimed_at.is_(None),
                leases.c.expires_at >= now,
            )
            .order_by(leases.c.started_at)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        stmt = (
            update(leases)
            .where(leases.c.id == pending, leases.c.claimed_at.is_(None))
            .values(claimed_at=now)
            .returning(*LEASE_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Lease, row) if row else None

    async def renew(self, lease_id: str, now: int) -> Lease | None:
        """Extend a live lease by its TTL. An expired lease stays dead even before the reaper
        has seen it: a late heartbeat never revives it."""
        stmt = (
            update(leases)
            .where(
                leases.c.id == lease_id,
                is_state(leases.c.status, "active"),
                leases.c.expires_at >= now,
            )
            .values(
                last_heartbeat=now,
                expires_at=literal(now, BigInteger()) + leases.c.ttl_seconds * 1000,
                claimed_at=func.coalesce(leases.c.claimed_at, now),
            )
            .returning(*LEASE_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Lease, row) if row else None

    async def end(
        self, lease_id: str, status: LeaseStatus, now: int, *, only_if_expired: bool = False
    ) -> Lease | None:
        """Compare-and-set an active lease to `status`; None if it was no longer active.

        With `only_if_expired` (the reaper), a lease renewed in the meantime is left alone; without
        it, an overdue lease cannot be ended as anything but expired, by the reaper.
        """
        stmt = update(leases).where(leases.c.id == lease_id, is_state(leases.c.status, "active"))
        if only_if_expired:
            stmt = stmt.where(leases.c.expires_at < now)
        else:
            stmt = stmt.where(leases.c.expires_at >= now)
        stmt = stmt.values(status=str(status), ended_at=now).returning(*LEASE_COLUMNS)
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Lease, row) if row else None

    async def end_all_for_worker(
        self, worker_id: str, status: LeaseStatus, now: int
    ) -> list[Lease]:
        stmt = (
            update(leases)
            .where(leases.c.worker_id == worker_id, is_state(leases.c.status, "active"))
            .values(status=str(status), ended_at=now)
            .returning(*LEASE_COLUMNS)
        )
        return [to_entity(Lease, row) for row in await self.conn.execute(stmt)]

    async def overdue_ids(self, now: int, limit: int) -> list[str]:
        stmt = (
            select(leases.c.id)
            .where(is_state(leases.c.status, "active"), leases.c.expires_at < now)
            .order_by(leases.c.expires_at)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars())

    async def next_expiry(self) -> int | None:
        stmt = select(func.min(leases.c.expires_at)).where(is_state(leases.c.status, "active"))
        value = (await self.conn.execute(stmt)).scalar_one_or_none()
        return int(value) if value is not None else None

    async def latest_worker_for_context(self, context_id: str) -> str | None:
        """The worker that holds, or most recently held, `context_id`."""
        stmt = (
            select(leases.c.worker_id)
            .where(leases.c.context_id == context_id)
            .order_by(leases.c.started_at.desc())
            .limit(1)
        )
        return (await self.conn.execute(stmt)).scalar_one_or_none()
