"""The composition root: the only place that builds adapters and wires services together."""

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from bloom.artifacts import ArtifactStore, DatabaseStore, FileStore
from bloom.clients.membridge import MembridgeClient
from bloom.db.database import Database, StorageKind, resolve_database
from bloom.domain.clock import Clock, system_clock
from bloom.domain.credentials import LoginPolicy
from bloom.domain.retry import RetryPolicy
from bloom.runtime.loops import Loop, PeriodicLoop, ReaperLoop
from bloom.runtime.secret_box import SecretBox
from bloom.runtime.secret_key import server_secret
from bloom.runtime.services.agent_ops import AgentOps
from bloom.runtime.services.approval_webhook import ApprovalWebhook, WebhookSettings
from bloom.runtime.services.approvals import ApprovalService
from bloom.runtime.services.artifact_moves import ArtifactMover
from bloom.runtime.services.attempts import AttemptService
from bloom.runtime.services.audit_export import AuditExporter, ExportPolicy
from bloom.runtime.services.budgets import BudgetService, HoldReleases
from bloom.runtime.services.config import ConfigService
from bloom.runtime.services.credentials import CredentialService, PasswordHasher
from bloom.runtime.services.dispatch import Dispatcher, DispatchSettings
from bloom.runtime.services.events import Bounds, EventService
from bloom.runtime.services.graphs import GraphService
from bloom.runtime.services.history import HistoryService
from bloom.runtime.services.install_script import InstallScripts, InstallSettings
from bloom.runtime.services.leasing import LeaseService, LeaseSettings
from bloom.runtime.services.membridge import MembridgeService
from bloom.runtime.services.metrics import MetricsService
from bloom.runtime.services.projects import ProjectService
from bloom.runtime.services.reaping import LeaseReaper, renew_after_outage
from bloom.runtime.services.records import RecordService
from bloom.runtime.services.signals import EventSignal, QueueSignal
from bloom.runtime.services.state_log import log_state_changes
from bloom.runtime.services.tasks import TaskService
from bloom.runtime.services.tool_policies import ToolPolicyService
from bloom.runtime.services.usage import UsageService
from bloom.runtime.services.worker_sync import WorkerSync
from bloom.runtime.services.workers import WorkerService
from bloom.runtime.services.workspaces import WorkspaceService
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.notifications import EventsPublisher, QueueListener, QueuePublisher
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase
from bloom.web.lockout import Lockouts

if TYPE_CHECKING:
    from bloom.objects.s3 import S3Bucket


AUDIT_EXPORT_CHECK_SEC = 60.0
"""How often the exporter looks whether a full object is waiting (or its interval has passed)."""
QUEUE_HISTORY_SEC = 60.0
"""How often the queue's depth is sampled for the dashboard's history (one sample a minute)."""
EVENTS_PRUNE_SEC = 3600.0
"""How often events older than the retention are deleted."""
APPROVALS_EXPIRY_SEC = 5.0
"""How often calls waiting past their `expires_at` get their `on_timeout`."""
WEBHOOK_SEC = 2.0
"""How often the approvals' webhook deliveries that are due are tried."""
CLAIMS_SEEN_SEC = 1.0
"""How often the signs of life of claims that found nothing at a glance are written."""


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
    workspaces: WorkspaceService
    graphs: GraphService
    artifact_moves: ArtifactMover
    audit_export: AuditExporter | None
    metrics: MetricsService
    events: EventService
    credentials: CredentialService
    install_scripts: InstallScripts
    reaper: LeaseReaper
    membridge_client: MembridgeClient
    membridge: MembridgeService
    worker_sync: WorkerSync
    history: HistoryService
    usage: UsageService
    budgets: BudgetService
    tool_policies: ToolPolicyService
    approvals: ApprovalService
    dispatcher: Dispatcher
    agents: AgentOps
    projects: ProjectService
    agent_http: httpx.AsyncClient
    """The client of nodes' agents (dispatch, agent management, projects' clones)."""
    loops: list[Loop] = field(default_factory=list)
    approval_webhook: ApprovalWebhook | None = None
    """Tells the configured webhook of each approval asked for (none configured: None)."""
    clock: Clock = system_clock
    started_at: float = field(default_factory=time.monotonic)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_at

    async def close(self) -> None:
        await self.dispatcher.close()
        await self.agent_http.aclose()
        await self.membridge_client.close()
        if self.approval_webhook is not None:
            await self.approval_webhook.close()
        for store in self.records.stores.values():
            await store.close()
        await self.db.dispose()


def object_bucket(settings: RuntimeSettings) -> "S3Bucket | None":
    """The S3 bucket, when one is configured (aiobotocore is loaded only then)."""
    if not settings.s3_configured:
        return None
    from bloom.objects.s3 import S3Bucket

    return S3Bucket(settings)


def artifact_stores(
    settings: RuntimeSettings, bucket: "S3Bucket | None"
) -> dict[str, ArtifactStore]:
    """Every store content may be read from (S3 when configured), by kind."""
    stores: dict[str, ArtifactStore] = {
        "db": DatabaseStore(),
        "fs": FileStore(settings.resolved_artifact_dir),
    }
    if bucket is not None:
        from bloom.artifacts.s3 import S3Store

        stores["s3"] = S3Store(bucket)
    return stores


def audit_exporter(
    settings: RuntimeSettings, db: RuntimeDatabase, bucket: "S3Bucket | None", clock: Clock
) -> AuditExporter | None:
    if bucket is None or not settings.exports_audit:
        return None
    policy = ExportPolicy(
        rows_per_object=settings.audit_export_rows,
        interval_ms=int(settings.audit_export_interval_sec * 1000),
        settle_ms=int(settings.audit_export_settle_sec * 1000),
        retention_ms=int(settings.audit_retention_days * 86_400_000),
    )
    return AuditExporter(db, bucket, clock, policy)


def event_bounds(settings: RuntimeSettings) -> Bounds:
    return Bounds(
        max_bytes=settings.events_max_bytes,
        retention_ms=int(settings.events_retention_days * 86_400_000),
        streams_per_caller=settings.event_streams_per_caller,
    )


def login_policy(settings: RuntimeSettings) -> LoginPolicy:
    return LoginPolicy(
        max_failures_per_user=settings.login_max_failures,
        max_failures_per_address=settings.login_max_failures_per_address,
        backoff=RetryPolicy(
            base_ms=settings.login_lockout_sec * 1000, max_ms=settings.login_lockout_max_sec * 1000
        ),
        window_sec=settings.login_failure_window_sec,
    )


def build_container(
    settings: RuntimeSettings, clock: Clock = system_clock, *, serving: bool = False
) -> Container:
    """Everything the runtime is made of. `serving`: for the server itself, which renews the
    active leases at start and after a database outage (`renew_after_outage`); a command that
    only reads or administers (`bloom audit export`, `bloom key …`) must not."""
    db = Database(
        resolve_database(settings.database_url, settings.data_dir),
        Repositories,
        pool_size=settings.db_pool_size,
        sqlite_synchronous=settings.sqlite_synchronous,
        committed=log_state_changes,
        recovery=[lambda tx: renew_after_outage(tx, clock())] if serving else [],
    )
    is_postgres = db.kind is StorageKind.POSTGRESQL
    origin = uuid.uuid4().hex  # this process, in its queue notifications
    signal = QueueSignal(QueuePublisher(db, origin).publish if is_postgres else None)
    event_signal = EventSignal(EventsPublisher(db).publish if is_postgres else None)
    bucket = object_bucket(settings)
    stores = artifact_stores(settings, bucket)
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
    reaper = LeaseReaper(db, signal, clock, stall_sec=settings.stall_sec)
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
    leases = LeaseService(db, signal, clock, lease_settings)
    agent_http, agent_key = httpx.AsyncClient(), settings.agent_key.get_secret_value()
    credentials = CredentialService(
        db,
        clock,
        hasher=PasswordHasher(settings.password_hash_threads),
        lockouts=Lockouts.from_url(
            settings.rate_limit_storage, key_prefix=settings.rate_limit_key_prefix
        ),
        policy=login_policy(settings),
    )
    releases = HoldReleases(db, signal, clock)
    agents = AgentOps(db, clock, agent_http, agent_key)
    membridge = MembridgeService(db, client, config, clock)
    records = RecordService(db, stores)
    events = EventService(db, event_signal, signal, clock, bounds=event_bounds(settings))
    container = Container(
        settings=settings,
        db=db,
        signal=signal,
        tasks=TaskService(db, signal, clock, lease_settings),
        leases=leases,
        attempts=AttemptService(
            db, signal, clock, stores[settings.artifact_store], retry, releases, events
        ),
        workers=WorkerService(db, signal, clock),
        config=config,
        records=records,
        workspaces=WorkspaceService(db, records),
        graphs=GraphService(db),
        artifact_moves=ArtifactMover(db, stores),
        audit_export=audit_exporter(settings, db, bucket, clock),
        metrics=MetricsService(db, clock),
        events=events,
        credentials=credentials,
        install_scripts=InstallScripts(
            db,
            clock,
            credentials,
            InstallSettings(settings.public_url, settings.install_repo_url, agent_key),
        ),
        reaper=reaper,
        membridge_client=client,
        membridge=membridge,
        worker_sync=worker_sync,
        history=HistoryService(db, clock),
        usage=UsageService(db, clock),
        budgets=BudgetService(db, signal, clock, releases),
        tool_policies=ToolPolicyService(db, clock),
        approvals=ApprovalService(db, signal, clock, lease_settings),
        dispatcher=Dispatcher(
            db,
            leases,
            signal,
            clock,
            agent_http,
            DispatchSettings(
                callback_url=settings.callback_url,
                agent_key=agent_key,
                accept_sec=settings.dispatch_accept_sec,
            ),
        ),
        agents=agents,
        projects=ProjectService(db, clock, agents, membridge),
        agent_http=agent_http,
        clock=clock,
    )
    container.loops.append(ReaperLoop(reaper, settings.reaper_interval_sec, clock))
    container.loops.append(releases)
    container.loops.append(
        PeriodicLoop("claims-ready", container.leases.wake_if_ready, settings.claim_recheck_sec)
    )
    container.loops.append(PeriodicLoop("claims-seen", container.leases.note_seen, CLAIMS_SEEN_SEC))
    container.loops.append(
        PeriodicLoop("worker_sync", worker_sync.sync_once, settings.worker_sync_sec)
    )
    container.loops.append(
        PeriodicLoop("queue-history", container.history.sample, QUEUE_HISTORY_SEC)
    )
    container.loops.append(
        PeriodicLoop("events-retention", container.events.prune, EVENTS_PRUNE_SEC)
    )
    container.loops.append(
        PeriodicLoop("approvals-expiry", container.approvals.expire_due, APPROVALS_EXPIRY_SEC)
    )
    if settings.approvals_webhook_url:
        webhook = ApprovalWebhook(
            db,
            clock,
            WebhookSettings(
                url=settings.approvals_webhook_url,
                secret=settings.approvals_webhook_secret.get_secret_value(),
                allow_private=settings.approvals_webhook_allow_private,
                public_url=settings.callback_url,
            ),
        )
        container.approval_webhook = webhook
        container.loops.append(PeriodicLoop("approvals-webhook", webhook.step, WEBHOOK_SEC))
    if container.audit_export is not None:
        check_sec = min(settings.audit_export_interval_sec, AUDIT_EXPORT_CHECK_SEC)
        container.loops.append(PeriodicLoop("audit_export", container.audit_export.step, check_sec))
    if is_postgres:

        async def listening() -> None:
            """Notifications may have been lost before: look again for what they announced."""
            event_signal.wake(None)
            await container.leases.wake_if_ready()

        container.loops.append(
            QueueListener(
                db.target, signal.wake, listening, origin=origin, on_events=event_signal.wake
            )
        )
    return container
