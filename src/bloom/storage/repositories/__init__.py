"""Repositories: typed SQL over one session; a service gets them all in one transaction."""

from sqlalchemy import bindparam, func, select

from bloom.storage.executor import Session
from bloom.storage.repositories.leases import LeaseRepository
from bloom.storage.repositories.records import (
    ArtifactRepository,
    AuditRepository,
    ResultRepository,
    SettingsRepository,
)
from bloom.storage.repositories.tasks import TaskRepository
from bloom.storage.repositories.workers import WorkerRepository

_TRY_LOCK = select(func.pg_try_advisory_xact_lock(bindparam("b_key")).label("locked"))


class Repositories:
    """Every repository, sharing one session (and so one transaction)."""

    def __init__(self, session: Session):
        self.session = session
        self.kind = session.kind
        self.tasks = TaskRepository(session)
        self.leases = LeaseRepository(session)
        self.workers = WorkerRepository(session)
        self.artifacts = ArtifactRepository(session)
        self.results = ResultRepository(session)
        self.audit = AuditRepository(session)
        self.settings = SettingsRepository(session)

    async def try_singleton_lock(self, key: int) -> bool:
        """Take a transaction-scoped lock that at most one replica holds (PostgreSQL); SQLite has
        a single writer already."""
        if self.kind != "postgresql":
            return True
        rows = await self.session.execute(_TRY_LOCK, {"b_key": key})
        return bool(rows[0]["locked"])


__all__ = ["Repositories"]
