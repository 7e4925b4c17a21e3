"""The composition root: the only place that builds Membridge's database and services."""

from dataclasses import dataclass

import httpx

from bloom.db.database import Database, DatabaseTarget, resolve_database
from bloom.domain.clock import Clock, system_clock
from bloom.domain.memory import Keys
from bloom.membridge.services.agents import AgentService
from bloom.membridge.services.fleet import FleetService, LeaseStores
from bloom.membridge.services.jobs import JobService
from bloom.membridge.services.metrics import MetricsService
from bloom.membridge.services.projects import ProjectService
from bloom.membridge.services.sync import SyncService
from bloom.membridge.settings import DEFAULT_DATABASE_NAME, MembridgeSettings
from bloom.membridge.storage.repositories import MembridgeDatabase, MembridgeRepositories
from bloom.memory.leadership import LeaseStore
from bloom.objects.s3 import S3Bucket


@dataclass
class Container:
    settings: MembridgeSettings
    db: MembridgeDatabase
    agents: AgentService
    projects: ProjectService
    fleet: FleetService
    jobs: JobService
    metrics: MetricsService
    sync: SyncService
    http: httpx.AsyncClient
    bucket: S3Bucket | None

    async def close(self) -> None:
        await self.http.aclose()
        if self.bucket is not None:
            await self.bucket.close()
        await self.db.dispose()


def database_target(settings: MembridgeSettings) -> DatabaseTarget:
    """Where Membridge's tables live (raises `DatabaseUrlError` for a URL we cannot use)."""
    return resolve_database(settings.database_url, settings.data_dir, DEFAULT_DATABASE_NAME)


def build_container(settings: MembridgeSettings, clock: Clock = system_clock) -> Container:
    db: MembridgeDatabase = Database(
        database_target(settings), MembridgeRepositories, pool_size=settings.db_pool_size
    )
    http = httpx.AsyncClient(timeout=settings.agent_timeout_sec)
    memory = settings.model_copy(update={"s3_bucket": settings.memory_bucket})
    bucket = S3Bucket(memory) if settings.writes_leases else None
    leases: LeaseStores | None = None
    if bucket is not None:
        memory_bucket = bucket

        def leases(canonical_id: str) -> LeaseStore:
            return LeaseStore(memory_bucket, Keys(canonical_id))

    return Container(
        settings=settings,
        db=db,
        agents=AgentService(db, clock),
        projects=ProjectService(db, clock),
        fleet=FleetService(db, clock, leases),
        jobs=JobService(db),
        metrics=MetricsService(db),
        sync=SyncService(db, clock, http, settings.agent_key.get_secret_value()),
        http=http,
        bucket=bucket,
    )
