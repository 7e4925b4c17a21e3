"""SQL for `workers`: the registry, and the row lock that serialises lease grants per worker."""

from typing import Any

from sqlalchemy import delete, func, select, update

from bloom.domain.models import Worker
from bloom.storage.repositories.base import Repository, entity_columns, is_state, to_entity
from bloom.storage.tables import workers

WORKER_COLUMNS = entity_columns(workers, Worker)


class WorkerRepository(Repository):
    async def get(self, worker_id: str) -> Worker | None:
        stmt = select(*WORKER_COLUMNS).where(workers.c.id == worker_id)
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Worker, row) if row else None

    async def lock(self, worker_id: str) -> Worker | None:
        """Read the worker and hold its row lock to the end of the transaction.

        Every lease grant to a worker takes this lock first, so counting its active leases and
        inserting a new one cannot interleave with another grant to the same worker.
        """
        stmt = select(*WORKER_COLUMNS).where(workers.c.id == worker_id).with_for_update()
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Worker, row) if row else None

    async def touch(self, worker_id: str, now: int) -> Worker | None:
        """A sign of life from the worker itself: it is online now. Locks the row like `lock`."""
        stmt = (
            update(workers)
            .where(workers.c.id == worker_id)
            .values(last_heartbeat=now, status="online")
            .returning(*WORKER_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Worker, row) if row else None

    async def find(self) -> list[Worker]:
        rows = await self.conn.execute(select(*WORKER_COLUMNS).order_by(workers.c.id))
        return [to_entity(Worker, row) for row in rows]

    async def insert_new(self, worker: Worker) -> bool:
        """Insert unless a worker with this id exists; True when inserted."""
        values = {column.name: getattr(worker, column.name) for column in WORKER_COLUMNS}
        stmt = (
            self.dialect_insert(workers)
            .values(values)
            .on_conflict_do_nothing(index_elements=[workers.c.id])
            .returning(workers.c.id)
        )
        return (await self.conn.execute(stmt)).first() is not None

    async def update(self, worker_id: str, values: dict[str, Any]) -> Worker | None:
        stmt = (
            update(workers)
            .where(workers.c.id == worker_id)
            .values(values)
            .returning(*WORKER_COLUMNS)
        )
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Worker, row) if row else None

    async def delete(self, worker_id: str) -> bool:
        result = await self.conn.execute(delete(workers).where(workers.c.id == worker_id))
        return bool(result.rowcount)

    async def totals(self) -> tuple[int, int]:
        """(all workers, online workers)."""
        online = func.count().filter(is_state(workers.c.status, "online"))
        row = (await self.conn.execute(select(func.count(), online))).one()
        return int(row[0]), int(row[1] or 0)
