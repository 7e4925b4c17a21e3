"""Membridge's repositories: typed SQL over one connection; a service gets them all in one
transaction (the runtime's `Database`, generic over its repositories, hands them out)."""

from functools import cached_property

from bloom.db.database import Database
from bloom.db.executor import Connection
from bloom.membridge.storage.repositories.agents import AgentRepository
from bloom.membridge.storage.repositories.jobs import JobRepository
from bloom.membridge.storage.repositories.nodes import LeadershipRepository, NodeRepository
from bloom.membridge.storage.repositories.projects import (
    HeartbeatProjectRepository,
    ProjectRepository,
)


class MembridgeRepositories:
    """Every Membridge repository, sharing one connection (and so one transaction)."""

    def __init__(self, connection: Connection):
        self.connection = connection

    @cached_property
    def agents(self) -> AgentRepository:
        return AgentRepository(self.connection)

    @cached_property
    def projects(self) -> ProjectRepository:
        return ProjectRepository(self.connection)

    @cached_property
    def heartbeat_projects(self) -> HeartbeatProjectRepository:
        return HeartbeatProjectRepository(self.connection)

    @cached_property
    def nodes(self) -> NodeRepository:
        return NodeRepository(self.connection)

    @cached_property
    def leadership(self) -> LeadershipRepository:
        return LeadershipRepository(self.connection)

    @cached_property
    def jobs(self) -> JobRepository:
        return JobRepository(self.connection)


MembridgeDatabase = Database[MembridgeRepositories]
"""Membridge's database: its connections come with Membridge's repositories."""

__all__ = ["MembridgeDatabase", "MembridgeRepositories"]
