"""The composition root: the only place that builds Membridge's database and services."""

from dataclasses import dataclass

from bloom.db.database import Database, DatabaseTarget, resolve_database
from bloom.domain.clock import Clock, system_clock
from bloom.membridge.services.agents import AgentService
from bloom.membridge.services.fleet import FleetService
from bloom.membridge.services.jobs import JobService
from bloom.membridge.services.metrics import MetricsService
from bloom.membridge.services.projects import ProjectService
from bloom.membridge.settings import DEFAULT_DATABASE_NAME, MembridgeSettings
from bloom.membridge.storage.repositories import MembridgeDatabase, MembridgeRepositories


@dataclass
class Container:
    settings: MembridgeSettings
    db: MembridgeDatabase
    agents: AgentService
    projects: ProjectService
    fleet: FleetService
    jobs: JobService
    metrics: MetricsService

    async def close(self) -> None:
        await self.db.dispose()


def database_target(settings: MembridgeSettings) -> DatabaseTarget:
    """Where Membridge's tables live (raises `DatabaseUrlError` for a URL we cannot use)."""
    return resolve_database(settings.database_url, settings.data_dir, DEFAULT_DATABASE_NAME)


def build_container(settings: MembridgeSettings, clock: Clock = system_clock) -> Container:
    db: MembridgeDatabase = Database(
        database_target(settings), MembridgeRepositories, pool_size=settings.db_pool_size
    )
    return Container(
        settings=settings,
        db=db,
        agents=AgentService(db, clock),
        projects=ProjectService(db, clock),
        fleet=FleetService(db, clock),
        jobs=JobService(db),
        metrics=MetricsService(db),
    )
