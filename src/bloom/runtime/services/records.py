"""Read-side use-cases over the records the engine keeps: artifacts, audit (and a filtered page of
it), leases, a task's attempts, results and stall, stats."""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from bloom.artifacts import ArtifactStore, ContentMissing, StoreUnavailable
from bloom.artifacts.store import content_size, open_content
from bloom.domain.errors import NotFound, Unavailable
from bloom.domain.models import Artifact, AuditEntry, Lease, Result, Task
from bloom.domain.paging import Cursor, Page, check_limit, page_of
from bloom.domain.stall import Stall
from bloom.domain.states import TaskStatus
from bloom.runtime.services.attempts import STORE_RETRY_AFTER_SEC
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(slots=True)
class Stats:
    """The seed's `/stats` shape."""

    tasks: dict[str, object] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which audit entries a page lists; None matches anything. `entity_id` matches an entry's
    entity or its task (so a task's filter finds its leases' entries too)."""

    action: str | None = None
    entity_type: str | None = None
    actor: str | None = None
    entity_id: str | None = None

    def equal(self) -> dict[str, str]:
        """The columns an entry must equal, by name."""
        values = {"action": self.action, "entity_type": self.entity_type, "actor": self.actor}
        return {name: value for name, value in values.items() if value is not None}


def audit_position(entry: AuditEntry) -> Cursor:
    return Cursor(entry.timestamp, entry.id)


@dataclass(frozen=True, slots=True)
class Content:
    """An artifact's content, to be opened for a byte range (`first`..`last`, inclusive)."""

    size: int
    sha256: str | None
    media_type: str
    open: Callable[[int, int], Awaitable[AsyncIterator[bytes]]]


class RecordService:
    def __init__(self, db: RuntimeDatabase, stores: dict[str, ArtifactStore]):
        self.db = db
        self.stores = stores

    async def audit(self, *, limit: int, task_id: str | None = None) -> list[AuditEntry]:
        async with self.db.read() as tx:
            return await tx.audit.find(limit=limit, task_id=task_id)

    async def audit_page(
        self, filter: AuditFilter, *, after: Cursor | None, limit: int
    ) -> Page[AuditEntry]:
        """Entries matching `filter`, newest first by (timestamp, id), from after the cursor."""
        check_limit(limit)
        async with self.db.read() as tx:
            rows = await tx.audit.page(
                equal=filter.equal(), entity_id=filter.entity_id, after=after, limit=limit + 1
            )
        return page_of(rows, limit, audit_position)

    async def attempts(self, task_id: str) -> list[Lease]:
        """The task's leases, oldest first (empty for an unknown task)."""
        async with self.db.read() as tx:
            return await tx.leases.of_task(task_id)

    async def stall(self, task: Task) -> Stall | None:
        """The stall of `task`'s running attempt: found stalled, and silent since."""
        if task.status is not TaskStatus.RUNNING or task.lease_id is None:
            return None
        async with self.db.read() as tx:
            return await tx.stalls.stall_of(task.lease_id)

    async def results(self, task_id: str) -> list[Result]:
        """The task's results, oldest first (empty for an unknown task)."""
        async with self.db.read() as tx:
            return await tx.results.of_task(task_id)

    async def leases(self, *, status: str | None, limit: int) -> list[Lease]:
        async with self.db.read() as tx:
            return await tx.leases.find(status=status, limit=limit)

    async def artifacts(self, *, task_id: str | None, limit: int) -> list[Artifact]:
        async with self.db.read() as tx:
            return await tx.artifacts.find(task_id=task_id, limit=limit)

    async def artifact(self, artifact_id: str) -> Artifact:
        async with self.db.read() as tx:
            artifact = await tx.artifacts.get(artifact_id)
        if artifact is None:
            raise NotFound("Artifact not found")
        return artifact

    async def artifact_content(self, artifact_id: str) -> Content:
        """An artifact's content, typed by the format its task asked for."""
        async with self.db.read() as tx:
            artifact = await tx.artifacts.get(artifact_id)
            task = await tx.tasks.get(artifact.task_id) if artifact else None
        if artifact is None:
            raise NotFound("Artifact not found")
        is_json = task is not None and task.desired_format == "json"
        media_type = "application/json" if is_json else "text/plain; charset=utf-8"
        try:
            size = content_size(artifact)
        except ContentMissing:
            raise NotFound("Artifact has no content") from None
        return Content(size, artifact.sha256, media_type, _opener(self.stores, artifact))

    async def stats(self) -> Stats:
        """The seed's counts (its `by_status` names the statuses some task is in), read from
        the kept counts and the active leases' index: no table is counted through."""
        async with self.db.read() as tx:
            counted, leases_total = await tx.counts.totals()
            leases_active = await tx.leases.count_active()
            workers_total, workers_online = await tx.workers.totals()
        by_status = {status: n for status, n in counted.items() if n}
        return Stats(
            tasks={"total": sum(by_status.values()), "by_status": by_status},
            leases={"total": leases_total, "active": leases_active},
            workers={"total": workers_total, "online": workers_online},
        )


def _opener(
    stores: dict[str, ArtifactStore], artifact: Artifact
) -> Callable[[int, int], Awaitable[AsyncIterator[bytes]]]:
    """Opens an artifact's content, its faults as the API's refusals."""

    async def opened(first: int, last: int) -> AsyncIterator[bytes]:
        try:
            return await open_content(stores, artifact, first, last)
        except ContentMissing:
            raise NotFound("Artifact content is missing from its store") from None
        except StoreUnavailable:
            raise Unavailable(
                "Artifact store unavailable", retry_after_sec=STORE_RETRY_AFTER_SEC
            ) from None

    return opened
