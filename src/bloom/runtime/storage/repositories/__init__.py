"""Repositories: typed SQL over one connection; a service gets them all in one transaction."""

from functools import cached_property

from sqlalchemy import bindparam, func, select

from bloom.db.database import Database
from bloom.db.executor import Connection
from bloom.domain.models import AuditEntry
from bloom.runtime.storage.repositories.approvals import ApprovalRepository
from bloom.runtime.storage.repositories.budgets import BudgetRepository
from bloom.runtime.storage.repositories.counts import CountRepository
from bloom.runtime.storage.repositories.credentials import ApiKeyRepository, UserRepository
from bloom.runtime.storage.repositories.ends import EndRepository
from bloom.runtime.storage.repositories.events import EventRepository
from bloom.runtime.storage.repositories.graphs import GraphRepository
from bloom.runtime.storage.repositories.keepers import KeeperRepository
from bloom.runtime.storage.repositories.leases import LeaseRepository
from bloom.runtime.storage.repositories.projects import ProjectRepository
from bloom.runtime.storage.repositories.records import (
    ArtifactRepository,
    AuditRepository,
    ResultRepository,
    SettingsRepository,
)
from bloom.runtime.storage.repositories.rollups import RollupRepository
from bloom.runtime.storage.repositories.samples import SampleRepository
from bloom.runtime.storage.repositories.stalls import StallRepository
from bloom.runtime.storage.repositories.tasks import TaskRepository
from bloom.runtime.storage.repositories.tool_policies import ToolPolicyRepository
from bloom.runtime.storage.repositories.workers import WorkerRepository

_TRY_LOCK = select(func.pg_try_advisory_xact_lock(bindparam("b_key")).label("locked"))


class Repositories:
    """Every repository, sharing one connection (and so one transaction)."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self.kind = connection.kind

    @cached_property
    def tasks(self) -> TaskRepository:
        return TaskRepository(self.connection)

    @cached_property
    def approvals(self) -> ApprovalRepository:
        return ApprovalRepository(self.connection)

    @cached_property
    def ends(self) -> EndRepository:
        return EndRepository(self.connection)

    @cached_property
    def graphs(self) -> GraphRepository:
        return GraphRepository(self.connection)

    @cached_property
    def leases(self) -> LeaseRepository:
        return LeaseRepository(self.connection)

    @cached_property
    def stalls(self) -> StallRepository:
        return StallRepository(self.connection)

    @cached_property
    def workers(self) -> WorkerRepository:
        return WorkerRepository(self.connection)

    @cached_property
    def keepers(self) -> KeeperRepository:
        return KeeperRepository(self.connection)

    @cached_property
    def artifacts(self) -> ArtifactRepository:
        return ArtifactRepository(self.connection)

    @cached_property
    def results(self) -> ResultRepository:
        return ResultRepository(self.connection)

    @cached_property
    def audit(self) -> AuditRepository:
        return AuditRepository(self.connection)

    @cached_property
    def samples(self) -> SampleRepository:
        return SampleRepository(self.connection)

    @cached_property
    def counts(self) -> CountRepository:
        return CountRepository(self.connection)

    @cached_property
    def rollups(self) -> RollupRepository:
        return RollupRepository(self.connection)

    @cached_property
    def events(self) -> EventRepository:
        return EventRepository(self.connection)

    @cached_property
    def api_keys(self) -> ApiKeyRepository:
        return ApiKeyRepository(self.connection)

    @cached_property
    def users(self) -> UserRepository:
        return UserRepository(self.connection)

    @cached_property
    def budgets(self) -> BudgetRepository:
        return BudgetRepository(self.connection)

    @cached_property
    def tool_policies(self) -> ToolPolicyRepository:
        return ToolPolicyRepository(self.connection)

    @cached_property
    def projects(self) -> ProjectRepository:
        return ProjectRepository(self.connection)

    @cached_property
    def settings(self) -> SettingsRepository:
        return SettingsRepository(self.connection)

    @property
    def audited(self) -> list[AuditEntry]:
        """The audit entries this transaction wrote (none if it wrote none)."""
        audit = self.__dict__.get("audit")
        return audit.added if isinstance(audit, AuditRepository) else []

    @property
    def released(self) -> list[str]:
        """The tasks this transaction queued by ending their last dependency (none if it
        touched no graph)."""
        graphs = self.__dict__.get("graphs")
        return graphs.released if isinstance(graphs, GraphRepository) else []

    async def try_singleton_lock(self, key: int) -> bool:
        """Take a transaction-scoped lock that at most one replica holds (PostgreSQL); SQLite has
        a single writer already."""
        if self.kind != "postgresql":
            return True
        rows = await self.connection.execute(_TRY_LOCK, {"b_key": key})
        return bool(rows[0]["locked"])


RuntimeDatabase = Database[Repositories]
"""The runtime's database: its connections come with the runtime's repositories."""

__all__ = ["Repositories", "RuntimeDatabase"]
