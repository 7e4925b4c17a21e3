"""The worker registry: register (upsert), list with live load, detail, remove."""

from dataclasses import dataclass, replace
from typing import Any

from bloom.domain.audit import AuditAction, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, NotFound
from bloom.domain.fleet import url_change
from bloom.domain.models import DEFAULT_CAPABILITIES, AuditEntry, Lease, Worker
from bloom.domain.states import LeaseStatus, TaskStatus, WorkerStatus
from bloom.runtime.services.reaping import release_task_of_lost_lease
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(slots=True)
class Registration:
    """A validated register request. None means "not sent": keep what is stored."""

    name: str
    url: str | None = None
    status: WorkerStatus = WorkerStatus.ONLINE
    capabilities: dict[str, Any] | None = None
    ip_addrs: list[str] | None = None
    agent_version: str | None = None
    os_info: str | None = None
    install_method: str | None = None


class WorkerService:
    def __init__(self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock):
        self.db = db
        self.signal = signal
        self.clock = clock

    async def register(
        self, reg: Registration, actor: str | None = None, *, trusted: bool = True
    ) -> tuple[Worker, bool]:
        """Create or update the worker named `reg.name`, audited as `actor`'s (the seed's "api"
        when None). Returns (worker, created).

        Unlike the seed, fields the request leaves out keep their stored values (re-registering
        without capabilities no longer resets them), and agent metadata is kept, not dropped.
        The agent URL is set only by a `trusted` caller (an admin); any other caller's URL waits
        in `pending_url` for an admin's approval (`url_change`), audited either way. A
        registration that changes nothing audited (`AUDITED_FIELDS`) writes no audit entry.
        """
        now, actor = self.clock(), actor or "api"
        given: dict[str, Any] = {
            key: value
            for key, value in {
                "capabilities": reg.capabilities,
                "ip_addrs": reg.ip_addrs,
                "agent_version": reg.agent_version,
                "os_info": reg.os_info,
                "install_method": reg.install_method,
            }.items()
            if value is not None
        }
        async with self.db.write() as tx:
            stored = await tx.workers.lock(reg.name)
            change = (
                url_change(stored.url, stored.pending_url, reg.url, trusted=trusted)
                if stored is not None
                else url_change("", None, reg.url, trusted=trusted)
            )
            fresh = Worker(
                id=reg.name,
                node_id=reg.name,
                url="",
                status=reg.status,
                capabilities=dict(DEFAULT_CAPABILITIES),
                last_heartbeat=now,
                ip_addrs=[],
                obs_count=0,
                db_sha="",
                registered_at=now,
                active_leases=0,
                agent_version="unknown",
                os_info="",
                install_method="manual",
            )
            fresh = replace(fresh, **(given | change.values))
            created = stored is None and await tx.workers.insert_new(fresh)
            worker = fresh
            if not created:
                updated = await tx.workers.update(
                    reg.name,
                    given
                    | change.values
                    | {"status": reg.status, "last_heartbeat": now, "source": "api"},
                )
                assert updated is not None, "the row exists: the insert just collided with it"
                worker = updated
            worker = replace(
                worker, active_leases=await tx.leases.count_active_for_worker(worker.id)
            )
            changed = _changed(stored, worker) if not created else []
            if created or changed:
                await tx.audit.add(
                    worker_audit(
                        AuditAction.WORKER_REGISTERED if created else AuditAction.WORKER_UPDATED,
                        worker.id,
                        now=now,
                        actor=actor,
                        detail=f"Worker {worker.id} registered, status={worker.status}, "
                        f"max_concurrency={worker.max_concurrency}"
                        + (f" (changed: {', '.join(changed)})" if changed else ""),
                    )
                )
            if change.action is not None:
                was = stored.url if stored is not None else ""
                await tx.audit.add(_url_audit(change.action, worker, was, now=now, actor=actor))
        # Its own claims look again (capacity or status may have changed), and one other: work
        # left to it (its contexts) may be anyone's now.
        self.signal.changed(Wake(1, frozenset({worker.id})))
        return worker, created

    async def approve_url(
        self, worker_id: str, url: str | None, actor: str | None = None
    ) -> Worker:
        """The agent URL the worker (or Membridge) proposed becomes the one the runtime calls.
        `url`, when given, must be the proposal (what the admin saw), else Conflict."""
        now = self.clock()
        async with self.db.write() as tx:
            worker = await tx.workers.lock(worker_id)
            if worker is None:
                raise NotFound("Worker not found")
            pending = worker.pending_url
            if pending is None:
                raise Conflict(f"Worker {worker_id} has no agent URL awaiting approval")
            if url is not None and url != pending:
                raise Conflict(f"Worker {worker_id} proposes {pending}, not {url}")
            approved = await tx.workers.update(worker_id, {"url": pending, "pending_url": None})
            assert approved is not None, "the row is locked"
            await tx.audit.add(
                _url_audit(
                    AuditAction.WORKER_URL_APPROVED, approved, worker.url, now, actor or "admin"
                )
            )
        return approved

    async def find(self) -> list[Worker]:
        """Every worker, with `active_leases` counted from live leases."""
        async with self.db.read() as tx:
            found = await tx.workers.find()
            counts = await tx.leases.active_counts()
        return [replace(worker, active_leases=counts.get(worker.id, 0)) for worker in found]

    async def get(self, worker_id: str) -> tuple[Worker, list[Lease]]:
        """A worker and its active leases."""
        async with self.db.read() as tx:
            worker = await tx.workers.get(worker_id)
            if worker is None:
                raise NotFound("Worker not found")
            active = await tx.leases.list_active_for_worker(worker_id)
        return replace(worker, active_leases=len(active)), active

    async def remove(self, worker_id: str, actor: str | None = None) -> None:
        """Unregister a worker. Its active leases end now and their tasks go back to the queue,
        rather than waiting out their TTL on a worker the operator says is gone."""
        now, actor = self.clock(), actor or "admin"
        async with self.db.write() as tx:
            # Worker row first, then its leases: the order every writer keeps (no deadlocks).
            if await tx.workers.lock(worker_id) is None:
                raise NotFound("Worker not found")
            requeued = 0
            for lease in await tx.leases.end_all_for_worker(worker_id, LeaseStatus.EXPIRED, now):
                released = await release_task_of_lost_lease(
                    tx, lease, now, actor=actor, reason="Worker unregistered"
                )
                requeued += released is not None and released.status == TaskStatus.QUEUED
            await tx.workers.delete(worker_id)
            await tx.audit.add(
                worker_audit(
                    AuditAction.WORKER_REMOVED,
                    worker_id,
                    now=now,
                    actor=actor,
                    detail=f"Worker {worker_id} unregistered",
                )
            )
        self.signal.changed(Wake(requeued))


AUDITED_FIELDS = ("status", "capabilities", "agent_version")
"""What a registration's audit entry is for; its URL has entries of its own, and the presence a
registration also is (every 15 s) is not an audit event."""


def _changed(stored: Worker | None, worker: Worker) -> list[str]:
    """The audited fields a registration changed (all of them when nothing was stored)."""
    if stored is None:
        return list(AUDITED_FIELDS)
    return [name for name in AUDITED_FIELDS if getattr(stored, name) != getattr(worker, name)]


def _url_audit(action: str, worker: Worker, was: str, now: int, actor: str) -> AuditEntry:
    """An entry for a change of a worker's agent URL (set, proposed or approved)."""
    shown = worker.pending_url if action == AuditAction.WORKER_URL_PROPOSED else worker.url
    detail = {
        AuditAction.WORKER_URL_SET: f"Agent URL of worker {worker.id} set to {shown or '(none)'}",
        AuditAction.WORKER_URL_PROPOSED: f"Worker {worker.id} proposes agent URL {shown}; "
        f"an admin approves it (bloom worker approve {worker.id})",
        AuditAction.WORKER_URL_APPROVED: f"Agent URL {shown} of worker {worker.id} approved",
    }[AuditAction(action)]
    return worker_audit(
        AuditAction(action),
        worker.id,
        now=now,
        actor=actor,
        detail=f"{detail} (was: {was or 'none'})",
    )
