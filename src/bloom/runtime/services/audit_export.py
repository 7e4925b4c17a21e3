"""The audit log, exported to the object store as gzip JSONL, each entry exactly once.

A batch is the entries after the checkpoint (the last exported id) written more than a settle
time ago, in id order (ids are time-ordered, and a transaction commits well within the settle
time, so no entry can later appear behind the checkpoint). Its object's key is made of its first
id, and it is written only if absent (`If-None-Match: *`), with the batch's last id in its
metadata; the checkpoint advances (never backwards) only after that. So a crash between upload
and checkpoint, or two replicas exporting at once, end with the same one object per range: the
one who finds the key taken adopts that object's last id instead of writing its own.
"""

import gzip
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import orjson
import structlog

from bloom.artifacts.store import one_chunk
from bloom.domain.clock import Clock
from bloom.domain.errors import Unavailable
from bloom.domain.models import AuditEntry
from bloom.objects.errors import ObjectStoreUnavailable
from bloom.runtime.storage.repositories import RuntimeDatabase

if TYPE_CHECKING:
    from bloom.objects.s3 import S3Bucket

log = structlog.get_logger(__name__)
CHECKPOINT = "audit_export.last_id"
KEY_PREFIX = "audit/runtime"
LAST_ID, ROWS = "last-id", "rows"


@dataclass(frozen=True, slots=True)
class ExportPolicy:
    rows_per_object: int = 10_000
    interval_ms: int = 300_000
    settle_ms: int = 60_000
    retention_ms: int = 0
    """Exported entries older than this are deleted from the database; 0 keeps them."""


@dataclass(slots=True)
class ExportReport:
    objects: int = 0
    rows: int = 0
    pruned: int = 0


def object_key(first: AuditEntry) -> str:
    day = datetime.fromtimestamp(first.timestamp / 1000, UTC).strftime("%Y/%m/%d")
    return f"{KEY_PREFIX}/{day}/{first.id}.jsonl.gz"


def jsonl_gz(entries: list[AuditEntry]) -> bytes:
    lines = b"".join(orjson.dumps(asdict(entry)) + b"\n" for entry in entries)
    return gzip.compress(lines, mtime=0)  # the same entries give the same bytes


class AuditExporter:
    def __init__(self, db: RuntimeDatabase, bucket: "S3Bucket", clock: Clock, policy: ExportPolicy):
        self.db = db
        self.bucket = bucket
        self.clock = clock
        self.policy = policy
        self._last_export: int | None = None

    async def step(self) -> ExportReport:
        """The periodic pass: export when a full object is waiting or the interval has passed
        since this process last exported; prune what retention lets go."""
        now = self.clock()
        async with self.db.read() as tx:
            checkpoint = await tx.settings.get(CHECKPOINT) or ""
            pending = await tx.audit.count_to_export(
                after_id=checkpoint, before=now - self.policy.settle_ms
            )
        due = self._last_export is None or now - self._last_export >= self.policy.interval_ms
        if pending >= self.policy.rows_per_object or (pending and due):
            return await self.export_pending()
        return ExportReport(pruned=await self._prune(checkpoint, now))

    async def export_pending(self) -> ExportReport:
        """Everything settled, in objects of at most `rows_per_object` entries (`bloom audit
        export`). An unreachable store stops it with the count so far; the rest waits."""
        report = ExportReport()
        try:
            while batch := await self._export_batch():
                rows, selected = batch
                report.objects += 1
                report.rows += rows
                if selected < self.policy.rows_per_object:  # nothing more is settled
                    break
        except ObjectStoreUnavailable as exc:
            raise Unavailable(f"{exc}; {report.rows} entries exported so far") from None
        self._last_export = self.clock()
        async with self.db.read() as tx:
            checkpoint = await tx.settings.get(CHECKPOINT) or ""
        report.pruned = await self._prune(checkpoint, self.clock())
        return report

    async def _export_batch(self) -> tuple[int, int] | None:
        """One object: (entries it holds, entries selected for it); None when nothing waits."""
        now = self.clock()
        async with self.db.read() as tx:
            checkpoint = await tx.settings.get(CHECKPOINT) or ""
            entries = await tx.audit.to_export(
                after_id=checkpoint,
                before=now - self.policy.settle_ms,
                limit=self.policy.rows_per_object,
            )
        if not entries:
            return None
        key = object_key(entries[0])
        put = await self.bucket.put(
            key,
            one_chunk(jsonl_gz(entries)),
            content_type="application/gzip",
            if_absent=True,
            metadata={LAST_ID: entries[-1].id, ROWS: str(len(entries))},
        )
        last_id, rows = entries[-1].id, len(entries)
        if not put.created:  # exported before (a crash, another replica): adopt that object
            found = await self.bucket.metadata(key)
            last_id, rows = found[LAST_ID], int(found.get(ROWS, "0"))
        async with self.db.write() as tx:
            await tx.settings.advance(CHECKPOINT, last_id)
        log.info("audit_exported", key=key, rows=rows, adopted=not put.created)
        return rows, len(entries)

    async def _prune(self, checkpoint: str, now: int) -> int:
        if not self.policy.retention_ms or not checkpoint:
            return 0
        async with self.db.write() as tx:
            pruned = await tx.audit.prune(upto_id=checkpoint, before=now - self.policy.retention_ms)
        if pruned:
            log.info("audit_pruned", rows=pruned)
        return pruned
