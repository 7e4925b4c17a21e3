"""The audit log exported to a real S3 endpoint as gzip JSONL, each entry exactly once: across a
crash between an object's upload and the checkpoint, two exporters racing, and retention, with
entries younger than the settle time left for later."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bloom.objects.s3 import S3Bucket
from bloom.runtime.container import Container, build_container
from bloom.runtime.services.audit_export import AuditExporter, ExportPolicy
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.storage.repositories.records import SettingsRepository
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.s3 import Bucket

SETTLE_SEC = 60


@pytest.fixture
async def container(
    database_url: str, tmp_path: Path, s3_bucket: Bucket, clock: FakeClock
) -> AsyncIterator[Container]:
    settings = make_settings(
        database_url,
        tmp_path,
        **s3_bucket.settings(),
        audit_export_rows=3,
        audit_export_settle_sec=SETTLE_SEC,
        audit_retention_days=1,
    )
    built = build_container(settings, clock)
    yield built
    await built.close()


async def write_entries(container: Container, count: int) -> list[str]:
    """`count` more audit entries (task creations); the ids of all there are, in order."""
    for i in range(count):
        await container.tasks.create(NewTask(context_id=f"c{i}", agent_slug="a", prompt="p"))
    async with container.db.read() as tx:
        entries = await tx.audit.find(limit=1000)
    return sorted(entry.id for entry in entries)


def exporter(container: Container) -> AuditExporter:
    assert container.audit_export is not None
    return container.audit_export


async def test_entries_go_out_once_in_objects_of_the_configured_size(
    container: Container, s3_bucket: Bucket, clock: FakeClock
) -> None:
    ids = await write_entries(container, 7)
    nothing_settled = await exporter(container).export_pending()
    assert (nothing_settled.rows, s3_bucket.audit_entries()) == (0, [])

    clock.advance(SETTLE_SEC + 1)
    report = await exporter(container).export_pending()
    assert (report.objects, report.rows) == (3, 7)  # 3 + 3 + 1
    assert [entry["id"] for entry in s3_bucket.audit_entries()] == ids
    assert set(s3_bucket.audit_entries()[0]) >= {"id", "timestamp", "action", "actor", "detail"}
    again = await exporter(container).export_pending()
    assert again.rows == 0
    assert [entry["id"] for entry in s3_bucket.audit_entries()] == ids


async def test_a_crash_between_upload_and_checkpoint_exports_nothing_twice(
    container: Container, s3_bucket: Bucket, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await write_entries(container, 2)
    clock.advance(SETTLE_SEC + 1)

    async def crash(self: SettingsRepository, key: str, value: str) -> None:
        raise ConnectionResetError("the process died here")

    with monkeypatch.context() as patched:  # the object is stored, the checkpoint is not
        patched.setattr(SettingsRepository, "advance", crash)
        with pytest.raises(ConnectionResetError):
            await exporter(container).export_pending()
    assert [entry["id"] for entry in s3_bucket.audit_entries()] == first

    everything = await write_entries(container, 5)  # more, so the next batch reaches further
    clock.advance(SETTLE_SEC + 1)
    report = await exporter(container).export_pending()
    ids = [entry["id"] for entry in s3_bucket.audit_entries()]
    assert ids == everything
    assert len(ids) == len(set(ids)) == 7
    assert report.rows == 7  # the adopted object's 2, then 3 and 2


async def test_two_exporters_racing_export_each_entry_once(
    container: Container, s3_bucket: Bucket, clock: FakeClock
) -> None:
    ids = await write_entries(container, 10)
    clock.advance(SETTLE_SEC + 1)
    rival = AuditExporter(
        container.db, S3Bucket(container.settings), clock, ExportPolicy(rows_per_object=3)
    )
    try:
        await asyncio.gather(exporter(container).export_pending(), rival.export_pending())
    finally:
        await rival.bucket.close()
    assert [entry["id"] for entry in s3_bucket.audit_entries()] == ids


async def test_retention_prunes_only_exported_entries(
    container: Container, s3_bucket: Bucket, clock: FakeClock
) -> None:
    await write_entries(container, 4)
    clock.advance(SETTLE_SEC + 1)
    await exporter(container).export_pending()
    await write_entries(container, 2)  # not exported yet
    clock.advance(86_400 + 1)
    report = await exporter(container).step()  # 2 pending, interval passed: exports, then prunes
    assert (report.rows, report.pruned) == (2, 6)
    async with container.db.read() as tx:
        assert await tx.audit.find(limit=100) == []
    assert len(s3_bucket.audit_entries()) == 6
