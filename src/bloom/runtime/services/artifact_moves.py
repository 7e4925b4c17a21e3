"""Moving artifact content between stores (`bloom artifacts migrate --to s3`).

Each artifact is copied, checked against its recorded SHA-256 as it streams, and only then is its
row pointed at the new home (conditionally: a row changed meanwhile is left alone). Rows are
walked in id order, so a run stopped at any point is resumed by running it again. Content left in
the old store stays there: files may be shared by several rows, and the row no longer needs it.
"""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from bloom.artifacts import (
    ArtifactStore,
    ContentMissing,
    DigestMismatch,
    ExternalStore,
    StoreUnavailable,
)
from bloom.artifacts.store import content_size, open_content
from bloom.domain.errors import Invalid, Unavailable
from bloom.domain.models import Artifact
from bloom.runtime.storage.repositories import RuntimeDatabase

BATCH = 100


@dataclass(slots=True)
class MoveReport:
    moved: int = 0
    moved_bytes: int = 0
    missing: int = 0
    mismatched: int = 0

    @property
    def problems(self) -> int:
        return self.missing + self.mismatched


class ArtifactMover:
    def __init__(self, db: RuntimeDatabase, stores: dict[str, ArtifactStore]):
        self.db = db
        self.stores = stores

    async def move_all(
        self, to: str, on_artifact: Callable[[Artifact, str], None] | None = None
    ) -> MoveReport:
        """Move every artifact whose content is elsewhere into store `to`; `on_artifact` hears
        of each one with what happened (`moved`, `missing`, `mismatch`)."""
        target = self.stores.get(to)
        if not isinstance(target, ExternalStore):
            raise Invalid(f"cannot move content into '{to}' (configured: fs, and s3 with MINIO_*)")
        report, after = MoveReport(), ""
        while True:
            async with self.db.read() as tx:
                batch = await tx.artifacts.stored_elsewhere(to, after_id=after, limit=BATCH)
            if not batch:
                return report
            for artifact in batch:
                try:
                    outcome = await self._move(artifact, target, to, report)
                except StoreUnavailable as exc:
                    raise Unavailable(
                        f"{exc}; {report.moved} moved so far: run again to resume"
                    ) from None
                if on_artifact is not None:
                    on_artifact(artifact, outcome)
            after = batch[-1].id

    async def _move(
        self, artifact: Artifact, target: ExternalStore, to: str, report: MoveReport
    ) -> str:
        assert artifact.sha256 is not None  # the walk takes only rows that have one
        try:
            stored = await target.put_stream(self._source(artifact), artifact.sha256)
        except ContentMissing:
            report.missing += 1
            return "missing"
        except DigestMismatch:
            report.mismatched += 1
            return "mismatch"
        async with self.db.write() as tx:
            await tx.artifacts.relocate(artifact.id, artifact.storage or "db", to, stored.url)
        report.moved += 1
        report.moved_bytes += stored.size_bytes
        return "moved"

    async def _source(self, artifact: Artifact) -> AsyncIterator[bytes]:
        size = content_size(artifact)
        if size == 0:
            return
        async for chunk in await open_content(self.stores, artifact, 0, size - 1):
            yield chunk
