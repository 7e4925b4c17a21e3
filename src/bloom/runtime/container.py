"""The composition root: the only place that builds adapters and wires services together."""

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bloom.artifacts import ArtifactStore, DatabaseStore, FileStore
from bloom.clients.membridge import MembridgeClient
from bloom.db.database import Database, StorageKind, resolve_database
from bloom.domain.clock import Clock, system_clock
from bloom.domain.retry import RetryPolicy
from bloom.runtime.loops import Loop, PeriodicLoop, ReaperLoop
from bloom.runtime.secret_box import SecretBox
from bloom.runtime.secret_key import server_secret
from bloom.runtime.services.artifact_moves import ArtifactMover
from bloom.runtime.services.attempts import AttemptService
from bloom.runtime.services.config import ConfigService
from bloom.runtime.services.credentials import CredentialService
from bloom.runtime.services.events import EventService
from bloom.runtime.services.leasing import LeaseService, LeaseSettings
from bloom.runtime.services.membridge import MembridgeService
from bloom.runtime.services.reaping import LeaseReaper
from bloom.runtime.services.records import RecordService
from bloom.runtime.services.signals import EventSignal, QueueSignal
from bloom.runtime.services.tasks import TaskService
from bloom.runtime.services.worker_sync import WorkerSync
from bloom.runtime.services.workers import WorkerService
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.notifications import EventsPublisher, QueueListener, QueuePublisher
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

if TYPE_CHECKING:
    from bloom.artifacts.s3 import S3Store


@dataclass
class Container:
    settings: RuntimeSettings
    db: RuntimeDatabase
    signal: QueueSignal
    tasks: TaskService
    leases: LeaseService
    attempts: AttemptService
    workers: WorkerService
    config: ConfigService
    records: RecordService
    artifact_moves: ArtifactMover
    events: EventService
    credentials: CredentialService
    reaper: LeaseReaper
    membridge_client: MembridgeClient
    membridge: MembridgeService
    worker_sync: WorkerSync
    loops: list[Loop] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_at

    async def close(self) -> None:
        await self.membridge_client.close()
        for store in self.records.stores.values():
            await store.close()
        await self.db.dispose()


def artifact_stores(settings: RuntimeSettings) -> dict[str, ArtifactStore]:
    """Every store content may be read from (S3 when configured), by kind."""
    stores: dict[str, ArtifactStore] = {
        "db": DatabaseStore(),
        "fs": FileStore(settings.resolved_artifact_dir),
    }
    if settings.s3_configured:
        stores["s3"] = s3_store(settings)
    return stores


def s3_store(settings: RuntimeSettings) -> "S3Store":
    from bloom.artifacts.s3 import S3Store  # aiobotocore is loaded only when it is used
    from bloom.objects.s3 import S3Bucket

    return S3Store(S3Bucket(settings))


def build_container(settings: RuntimeSettings, clock: Clock = system_clock) -> Container:
    db = Database(
        resolve_database(settings.database_url, settings.data_dir),
        Repositories,
        pool_size=settings.db_pool_size,
        sqlite_synchronous=settings.sqlite_synchronous,
    )
    is_postgres = db.kind is StorageKind.POSTGRESQL
    signal = QueueSignal(QueuePublisher(db).publish if is_postgres else None)
    event_signal = EventSignal(EventsPublisher(db).publish if is_postgres else None)
    stores = artifact_stores(settings)
    retry = RetryPolicy(
        base_ms=int(settings.retry_base_sec * 1000), max_ms=int(settings.retry_max_sec * 1000)
    )
    lease_settings = LeaseSettings(
        ttl_sec=settings.lease_ttl_sec,
        claim_wait_sec=settings.claim_wait_sec,
        claim_ack_sec=settings.claim_ack_sec,
        claim_recheck_sec=settings.claim_recheck_sec,
        sticky_wait_ms=int(settings.sticky_wait_sec * 1000),
        worker_live_ms=int(settings.worker_live_sec * 1000),
    )
    reaper = LeaseReaper(db, signal, clock)
    config = ConfigService(
        db,
        clock,
        box=SecretBox(server_secret(settings)),
        default_url=settings.membridge_server_url,
        default_admin_key=settings.membridge_admin_key.get_secret_value(),
    )
    client = MembridgeClient(
        config.membridge_credentials,
        clock,
        retries=settings.membridge_retries,
        timeout_sec=settings.membridge_timeout_sec,
    )
    config.connection = lambda: client.state
    worker_sync = WorkerSync(
        db, client, signal, clock, live_ms=int(settings.worker_live_sec * 1000)
    )
    container = Container(
        settings=settings,
        db=db,
        signal=signal,
        tasks=TaskService(db, signal, clock),
        leases=LeaseService(db, signal, clock, lease_settings),
        attempts=AttemptService(db, signal, clock, stores[settings.artifact_store], retry),
        workers=WorkerService(db, signal, clock),
        config=config,
        records=RecordService(db, stores),
        artifact_moves=ArtifactMover(db, stores),
        events=EventService(db, event_signal, signal, clock),
        credentials=CredentialService(db, clock),
        reaper=reaper,
        membridge_client=client,
        membridge=MembridgeService(db, client, config, clock),
        worker_sync=worker_sync,
    )
    container.loops.append(ReaperLoop(reaper, settings.reaper_interval_sec, clock))
    container.loops.append(
        PeriodicLoop("worker_sync", worker_sync.sync_once, settings.worker_sync_sec)
    )
    if is_postgres:
        container.loops.append(QueueListener(db.target, signal.wake, on_events=event_signal.wake))
    return container
