"""The composition root: the only place that builds adapters and wires services together."""

import time
from dataclasses import dataclass, field

from bloom.artifacts import ArtifactStore, DatabaseStore, FileStore
from bloom.domain.retry import RetryPolicy
from bloom.runtime.loops import Loop, ReaperLoop
from bloom.services.clock import Clock, system_clock
from bloom.services.completion import CompletionService
from bloom.services.config import ConfigService
from bloom.services.expiry import LeaseReaper
from bloom.services.leasing import LeaseService, LeaseSettings
from bloom.services.records import RecordService
from bloom.services.signals import QueueSignal
from bloom.services.tasks import TaskService
from bloom.services.workers import WorkerService
from bloom.settings import RuntimeSettings
from bloom.storage.database import Database, StorageKind, resolve_database
from bloom.storage.notifications import QueueListener, QueuePublisher
from bloom.storage.repositories import Repositories, RuntimeDatabase


@dataclass
class Container:
    settings: RuntimeSettings
    db: RuntimeDatabase
    signal: QueueSignal
    tasks: TaskService
    leases: LeaseService
    completion: CompletionService
    workers: WorkerService
    config: ConfigService
    records: RecordService
    reaper: LeaseReaper
    loops: list[Loop] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_at


def build_container(settings: RuntimeSettings, clock: Clock = system_clock) -> Container:
    db = Database(
        resolve_database(settings.database_url, settings.data_dir),
        Repositories,
        pool_size=settings.db_pool_size,
        sqlite_synchronous=settings.sqlite_synchronous,
    )
    is_postgres = db.kind is StorageKind.POSTGRESQL
    signal = QueueSignal(QueuePublisher(db).publish if is_postgres else None)
    stores: dict[str, ArtifactStore] = {
        "db": DatabaseStore(),
        "fs": FileStore(settings.resolved_artifact_dir),
    }
    retry = RetryPolicy(
        base_ms=int(settings.retry_base_sec * 1000), max_ms=int(settings.retry_max_sec * 1000)
    )
    lease_settings = LeaseSettings(
        ttl_sec=settings.lease_ttl_sec,
        claim_ack_sec=settings.claim_ack_sec,
        claim_recheck_sec=settings.claim_recheck_sec,
        sticky_wait_ms=int(settings.sticky_wait_sec * 1000),
        worker_live_ms=int(settings.worker_live_sec * 1000),
    )
    reaper = LeaseReaper(db, signal, clock)
    container = Container(
        settings=settings,
        db=db,
        signal=signal,
        tasks=TaskService(db, signal, clock),
        leases=LeaseService(db, signal, clock, lease_settings),
        completion=CompletionService(db, signal, clock, stores[settings.artifact_store], retry),
        workers=WorkerService(db, signal, clock),
        config=ConfigService(
            db,
            clock,
            default_url=settings.membridge_server_url,
            default_admin_key=settings.membridge_admin_key.get_secret_value(),
        ),
        records=RecordService(db, stores),
        reaper=reaper,
    )
    container.loops.append(ReaperLoop(reaper, settings.reaper_interval_sec, clock))
    if is_postgres:
        container.loops.append(QueueListener(db.target, signal.wake))
    return container
