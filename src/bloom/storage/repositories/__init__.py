"""Repositories: typed SQL over one connection; a service gets them all in one transaction."""

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from bloom.storage.repositories.leases import LeaseRepository
from bloom.storage.repositories.records import (
    ArtifactRepository,
    AuditRepository,
    ResultRepository,
    SettingsRepository,
)
from bloom.storage.repositories.tasks import TaskRepository
from bloom.storage.repositories.workers import WorkerRepository


class Repositories:
    """Every repository, sharing one connection (and so one transaction)."""

    def __init__(self, conn: AsyncConnection, kind: str):
        self.conn = conn
        self.kind = kind
        self.tasks = TaskRepository(conn, kind)
        self.leases = LeaseRepository(conn, kind)
        self.workers = WorkerRepository(conn, kind)
        self.artifacts = ArtifactRepository(conn, kind)
        self.results = ResultRepository(conn, kind)
        self.audit = AuditRepository(conn, kind)
        self.settings = SettingsRepository(conn, kind)

    async def try_singleton_lock(self, key: int) -> bool:
        """Take a transaction-scoped lock that at most one replica holds (PostgreSQL); SQLite has
        a single writer already."""
        if self.kind != "postgresql":
            return True
        result = await self.conn.execute(
            text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}
        )
        return bool(result.scalar_one())


__all__ = ["Repositories"]
