"""Memory sync against a real S3 endpoint (moto's server over HTTP) and real SQLite databases:
push and pull between nodes, the reference's bucket layout, the role gates, a push while the
plugin keeps writing, crashes between the uploads, and pulls that fail midway."""

import hashlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bloom.domain.ids import canonical_id
from bloom.domain.memory import ExitCode, Keys, Manifest, parse_sha256_text
from bloom.memory.actions import Action, perform
from bloom.memory.settings import MemorySettings
from bloom.objects.errors import ObjectStoreUnavailable
from bloom.objects.s3 import S3Bucket
from tests.support.memory import (
    Writer,
    add_observations,
    content_sha,
    count,
    make_db,
    node_settings,
)
from tests.support.s3 import Bucket

KEYS = Keys(canonical_id("mem"))


@pytest.fixture
def node(s3_bucket: Bucket, tmp_path: Path) -> Callable[..., MemorySettings]:
    def make(node_id: str, **overrides: object) -> MemorySettings:
        return node_settings(s3_bucket, tmp_path, node_id, "mem", **overrides)

    return make


def read_object(bucket: Bucket, key: str) -> bytes:
    body: bytes = bucket.client().get_object(Bucket=bucket.name, Key=key)["Body"].read()
    return body


async def test_push_publishes_the_reference_layout_and_pull_converges(
    s3_bucket: Bucket, node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=40)

    pushed = await perform(Action.PUSH, a)
    assert pushed.code is ExitCode.OK, pushed.detail
    sha = content_sha(a.db, tmp_path)
    manifest = Manifest.from_json(read_object(s3_bucket, KEYS.manifest))
    assert (manifest.sha256, manifest.observations, manifest.session_summaries) == (sha, 40, 1)
    assert (manifest.user_prompts, manifest.tables, manifest.project) == (1, 4, "mem")
    assert parse_sha256_text(read_object(s3_bucket, KEYS.sha256)) == sha
    assert read_object(s3_bucket, KEYS.sha256).decode() == f"{sha}  claude-mem.db\n"
    keys = s3_bucket.keys(KEYS.prefix)
    assert KEYS.db in keys
    assert KEYS.lease in keys
    assert KEYS.snapshot(sha) in keys
    assert KEYS.lock not in keys, "the lock is released after the push"
    assert any(k.startswith(f"{KEYS.prefix}/leadership/audit/") for k in keys)
    lease = json.loads(read_object(s3_bucket, KEYS.lease))
    assert (lease["primary_node_id"], lease["epoch"]) == ("a", 1)

    pulled = await perform(Action.PULL, b)
    assert pulled.code is ExitCode.OK, pulled.detail
    assert count(b.db) == 40
    assert content_sha(b.db, tmp_path) == sha

    again = await perform(Action.PULL, b)
    assert again.code is ExitCode.OK
    assert "up to date" in again.detail
    unchanged = await perform(Action.PUSH, a)
    assert unchanged.code is ExitCode.OK
    assert "up to date" in unchanged.detail


async def test_a_bucket_in_the_reference_tools_shape_is_read(
    s3_bucket: Bucket, node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    """Written as the reference writes it: a plain `claude-mem.db`, its `.sha256`, a manifest
    without our fields; and a lease of its shape."""
    source = make_db(tmp_path / "ref" / "claude-mem.db", observations=7)
    with sqlite3.connect(source) as db:  # as the reference makes its snapshot
        db.execute(f"VACUUM INTO '{tmp_path / 'vacuumed.db'}'")
    data = (tmp_path / "vacuumed.db").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    s3 = s3_bucket.client()
    s3.create_bucket(Bucket=s3_bucket.name)
    s3.put_object(Bucket=s3_bucket.name, Key=KEYS.db, Body=data)
    s3.put_object(Bucket=s3_bucket.name, Key=KEYS.sha256, Body=f"{sha}  claude-mem.db\n")
    manifest = {"project": "mem", "canonical_id": KEYS.canonical_id, "timestamp": "x",
                "source_host": "ref", "db_size": len(data), "sha256": sha, "observations": 7,
                "session_summaries": 1, "user_prompts": 1, "tables": 4}  # fmt: skip
    s3.put_object(Bucket=s3_bucket.name, Key=KEYS.manifest, Body=json.dumps(manifest))
    lease = {"canonical_id": KEYS.canonical_id, "primary_node_id": "ref", "issued_at": 1,
             "expires_at": 4_000_000_000, "lease_seconds": 3600, "epoch": 3,
             "policy": "primary_authoritative", "issued_by": "ref"}  # fmt: skip
    s3.put_object(Bucket=s3_bucket.name, Key=KEYS.lease, Body=json.dumps(lease))

    b = node("b")
    pulled = await perform(Action.PULL, b)
    assert pulled.code is ExitCode.OK, pulled.detail
    assert count(b.db) == 7
    blocked = await perform(Action.PUSH, b)
    assert blocked.code is ExitCode.SECONDARY_BLOCKED_PUSH, blocked.detail


async def test_role_gates_secondary_push_and_primary_pull(
    node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=5)
    assert (await perform(Action.PUSH, a)).code is ExitCode.OK
    make_db(b.db, observations=9, tag="b")

    blocked = await perform(Action.PUSH, b)
    assert blocked.code is ExitCode.SECONDARY_BLOCKED_PUSH, blocked.detail
    assert count(b.db) == 9

    add_observations(a.db, 3)
    refused = await perform(Action.PULL, a)
    assert refused.code is ExitCode.PRIMARY_REFUSED_PULL, refused.detail
    assert count(a.db) == 8, "a refused pull changes nothing"

    overridden = await perform(Action.PULL, node("a", allow_primary_pull_override=True))
    assert overridden.code is ExitCode.OK, overridden.detail
    assert count(a.db) == 5

    pulled = await perform(Action.PULL, b)
    assert pulled.code is ExitCode.OK
    assert pulled.facts["local_ahead"] is True
    backup = Path(str(pulled.facts["backup"]))
    assert count(backup / "claude-mem.db") == 9, "the local-ahead content is kept"
    note = json.loads((backup / "manifest.json").read_text())
    assert (note["local_obs"], note["remote_obs"], note["local_ahead"]) == (9, 5, True)


async def test_backups_are_pruned_to_the_retention_count(
    node: Callable[..., MemorySettings],
) -> None:
    a, b = node("a"), node("b", backup_max_count=2)
    make_db(a.db, observations=1)
    make_db(b.db, observations=1, tag="b")
    for _ in range(4):
        add_observations(a.db, 1)
        assert (await perform(Action.PUSH, a)).code is ExitCode.OK
        add_observations(b.db, 1, tag="b")  # a local change each time: a backup each time
        assert (await perform(Action.PULL, b)).code is ExitCode.OK
    assert len(list(b.backup_dir.iterdir())) == 2


async def test_push_while_the_plugin_writes_is_consistent(
    node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=2000)
    with Writer(a.db) as writer:
        while writer.written < 20:  # the writer is running
            time.sleep(0.005)
        pushed = await perform(Action.PUSH, a)
        assert pushed.code is ExitCode.OK, pushed.detail
        during = writer.written
    assert (await perform(Action.PULL, b)).code is ExitCode.OK
    got = count(b.db)
    assert 2020 <= got <= 2000 + during, "a consistent image taken during the writes"
    with sqlite3.connect(b.db) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert got == pushed.facts["observations"]


class Crash(BaseException):
    """The pushing process dies: nothing after this runs, not even its cleanup's S3 calls."""


class CrashingBucket(S3Bucket):
    """The real bucket, until the `crash_at`-th write of a push (the lock, the snapshot's
    uploads; leadership's writes are not counted): from then on every call dies, as if the
    process had been killed there."""

    def __init__(self, settings: MemorySettings, crash_at: int):
        super().__init__(settings)
        self.crash_at = crash_at
        self.writes = 0
        self.dead = False

    def _step(self, key: str) -> None:
        if self.dead:
            raise Crash
        if "/leadership/" in key:
            return
        self.writes += 1
        if self.writes == self.crash_at:
            self.dead = True
            raise Crash

    async def put(self, key: str, chunks: AsyncIterator[bytes], **kw: Any) -> Any:  # type: ignore[override]
        self._step(key)
        return await super().put(key, chunks, **kw)

    async def put_bytes(self, key: str, data: bytes, **kw: Any) -> None:
        self._step(key)
        await super().put_bytes(key, data, **kw)

    async def copy(self, source: str, target: str) -> None:
        self._step(target)
        await super().copy(source, target)

    async def swap(self, key: str, data: bytes, **kw: Any) -> str:
        self._step(key)
        return await super().swap(key, data, **kw)

    async def read(self, key: str) -> Any:
        if self.dead:
            raise Crash
        return await super().read(key)


PUBLISH_WRITES = ("lock", "snapshot", "claude-mem.db", ".sha256", "manifest")


@pytest.mark.parametrize("crash_at", range(1, len(PUBLISH_WRITES) + 1), ids=PUBLISH_WRITES)
async def test_a_crash_between_uploads_never_publishes_half(
    crash_at: int, node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    """A crash at each write of a push (before it): another node still pulls the previous
    snapshot whole; the dead pusher's lock expires by its TTL; the next push publishes."""
    a, b = node("a"), node("b")
    make_db(a.db, observations=10)
    assert (await perform(Action.PUSH, a)).code is ExitCode.OK
    first = content_sha(a.db, tmp_path)
    add_observations(a.db, 5)

    with pytest.raises(Crash):
        await perform(Action.PUSH, a, bucket=CrashingBucket(a, crash_at))

    pulled = await perform(Action.PULL, b)
    assert pulled.code is ExitCode.OK, pulled.detail
    assert content_sha(b.db, tmp_path) == first
    assert count(b.db) == 10

    again = await perform(Action.PUSH, a)  # the same node takes its own dead lock back
    assert again.code is ExitCode.OK, again.detail
    assert (await perform(Action.PULL, b)).code is ExitCode.OK
    assert count(b.db) == 15


async def test_a_dead_pushers_lock_blocks_until_its_ttl(
    node: Callable[..., MemorySettings],
) -> None:
    a = node("a", allow_secondary_push=True, lock_ttl_seconds=60, stale_lock_grace_seconds=5)
    c = node("c", allow_secondary_push=True, lock_ttl_seconds=60, stale_lock_grace_seconds=5)
    make_db(a.db, observations=3)
    make_db(c.db, observations=4, tag="c")
    with pytest.raises(Crash):  # dies holding the lock, before the snapshot upload
        await perform(Action.PUSH, a, bucket=CrashingBucket(a, crash_at=2))

    held = await perform(Action.PUSH, c)
    assert held.code is ExitCode.ERROR
    assert "lock held by a" in held.detail

    later = (int(time.time()) + 66) * 1000
    stolen = await perform(Action.PUSH, c, clock=lambda: later)
    assert stolen.code is ExitCode.OK, stolen.detail


class CutMidway(S3Bucket):
    """Downloads stop after their first chunk with the store gone."""

    async def get(self, key: str, first: int = 0, last: int | None = None, **kw: Any) -> Any:
        stream = await super().get(key, first, last, **kw)

        async def cut() -> AsyncIterator[bytes]:
            async for chunk in stream:
                yield chunk
                raise ObjectStoreUnavailable("connection reset")

        return cut()


async def test_a_pull_interrupted_midway_leaves_the_local_database_intact(
    node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=3000)  # more than one read chunk
    assert (await perform(Action.PUSH, a)).code is ExitCode.OK
    make_db(b.db, observations=12, tag="b")
    before = content_sha(b.db, tmp_path)

    failed = await perform(Action.PULL, b, bucket=CutMidway(b))
    assert failed.code is ExitCode.ERROR
    assert "unchanged" in failed.detail
    assert content_sha(b.db, tmp_path) == before
    assert count(b.db) == 12
    assert sorted(p.name for p in b.db.parent.iterdir() if p.name.startswith(".")) == []


async def test_a_snapshot_that_does_not_match_its_manifest_is_refused(
    s3_bucket: Bucket, node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=3)
    assert (await perform(Action.PUSH, a)).code is ExitCode.OK
    manifest = Manifest.from_json(read_object(s3_bucket, KEYS.manifest))
    assert manifest.snapshot is not None
    s3_bucket.client().put_object(Bucket=s3_bucket.name, Key=manifest.snapshot, Body=b"torn")
    make_db(b.db, observations=2, tag="b")

    failed = await perform(Action.PULL, b)
    assert failed.code is ExitCode.ERROR
    assert "manifest says" in failed.detail
    assert count(b.db) == 2


async def test_role_unknown_fails_closed(
    s3_bucket: Bucket, node: Callable[..., MemorySettings]
) -> None:
    a = node("a")
    make_db(a.db, observations=1)
    s3 = s3_bucket.client()
    s3.create_bucket(Bucket=s3_bucket.name)
    s3.put_object(Bucket=s3_bucket.name, Key=KEYS.lease, Body=b"{not json")
    refused = await perform(Action.PUSH, a)
    assert refused.code is ExitCode.ERROR
    assert "role unknown" in refused.detail
    assert KEYS.manifest not in s3_bucket.keys(KEYS.prefix)


async def test_status_and_doctor_report_without_writing(
    s3_bucket: Bucket, node: Callable[..., MemorySettings], tmp_path: Path
) -> None:
    a, b = node("a"), node("b")
    make_db(a.db, observations=4)
    assert (await perform(Action.PUSH, a)).code is ExitCode.OK
    before = s3_bucket.keys()

    status = await perform(Action.STATUS, b)
    assert status.code is ExitCode.OK
    assert status.facts["role"] == "secondary"
    assert status.facts["in_sync"] is False
    assert status.facts["local"] == {"exists": False}
    doctor = await perform(Action.DOCTOR, a)
    assert doctor.code is ExitCode.OK, doctor.facts
    assert doctor.facts["conditional_writes"][0] == "ok"
    assert doctor.facts["local_db"][0] == "ok"
    assert s3_bucket.keys() == before
