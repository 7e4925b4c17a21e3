"""Read-side use-cases over the records the engine keeps: artifacts, audit, leases, stats."""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from bloom.artifacts import ArtifactStore, ContentMissing, StoreUnavailable
from bloom.artifacts.store import content_size, open_content
from bloom.domain.errors import NotFound, Unavailable
from bloom.domain.models import Artifact, AuditEntry, Lease
from bloom.runtime.services.attempts import STORE_RETRY_AFTER_SEC
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(slots=True)
class Stats:
    """The seed's `/stats` shape."""

    tasks: dict[str, object] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)


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
        async with self.db.read() as tx:
            by_status = await tx.tasks.count_by_status()
            leases_total, leases_active = await tx.leases.totals()
            workers_total, workers_online = await tx.workers.totals()
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
