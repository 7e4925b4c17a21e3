"""Read-side use-cases over the records the engine keeps: artifacts, audit, leases, stats."""

from dataclasses import dataclass, field

from bloom.artifacts import ArtifactStore
from bloom.domain.errors import NotFound
from bloom.domain.models import Artifact, AuditEntry, Lease
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(slots=True)
class Stats:
    """The seed's `/stats` shape."""

    tasks: dict[str, object] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Content:
    data: bytes
    media_type: str


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
        """An artifact's bytes, typed by the format its task asked for."""
        async with self.db.read() as tx:
            artifact = await tx.artifacts.get(artifact_id)
            task = await tx.tasks.get(artifact.task_id) if artifact else None
        if artifact is None:
            raise NotFound("Artifact not found")
        if artifact.content is not None:
            data = artifact.content.encode()
        elif artifact.sha256 and artifact.storage in self.stores:
            try:
                data = await self.stores[artifact.storage].read(artifact.sha256)
            except FileNotFoundError:
                raise NotFound("Artifact content is missing from its store") from None
        else:
            raise NotFound("Artifact has no content")
        is_json = task is not None and task.desired_format == "json"
        return Content(data, "application/json" if is_json else "text/plain; charset=utf-8")

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
