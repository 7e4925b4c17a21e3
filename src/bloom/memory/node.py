"""One node's handle on one project's memory: its settings, the bucket, the keys, the lease and
the lock, and the time. What push, pull and the reports share."""

import asyncio
import platform
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bloom.domain.clock import Clock, system_clock
from bloom.domain.ids import canonical_id
from bloom.domain.memory import Keys, Lease, Manifest, Role
from bloom.memory.leadership import LeadershipUnknown, LeaseStore
from bloom.memory.lock import PushLockStore
from bloom.memory.settings import MemorySettings
from bloom.objects.errors import ObjectMissing
from bloom.objects.s3 import S3Bucket

CHUNK = 1024 * 1024


class ManifestUnreadable(Exception):
    """`manifest.json` exists but is not one: nothing can be trusted as published."""


@dataclass(frozen=True, slots=True)
class Standing:
    """A node's role, and the lease it follows (None when leadership is disabled)."""

    role: Role
    lease: Lease | None

    @property
    def epoch(self) -> int:
        return self.lease.epoch if self.lease else 0


class MemoryNode:
    def __init__(
        self,
        settings: MemorySettings,
        *,
        bucket: S3Bucket | None = None,
        clock: Clock = system_clock,
    ):
        settings.check()
        self.settings = settings
        self.keys = Keys(canonical_id(settings.project))
        self.bucket = bucket or S3Bucket(settings)
        self.leases = LeaseStore(self.bucket, self.keys)
        self.locks = PushLockStore(self.bucket, self.keys)
        self.clock = clock
        self.hostname = platform.node()

    @property
    def db(self) -> Path:
        return self.settings.db

    def now(self) -> int:
        """Epoch seconds, as the bucket's documents keep time."""
        return self.clock() // 1000

    async def standing(self) -> Standing:
        """This node's role, writing the lease when it must (bootstrap, renewal, takeover).
        `LeadershipUnknown` when it cannot be settled: callers fail closed."""
        s = self.settings
        if not s.leadership_enabled:
            return Standing(Role.PRIMARY, None)
        role, lease = await self.leases.resolve(
            node_id=s.node_id, preferred=s.primary_node_id, lease_seconds=s.lease_seconds,
            now=self.now(),
        )  # fmt: skip
        return Standing(role, lease)

    async def published(self) -> Manifest | None:
        """The manifest in force (None: nothing published yet)."""
        try:
            found = await self.bucket.read(self.keys.manifest)
        except ObjectMissing:
            return None
        try:
            return Manifest.from_json(found.data)
        except ValueError as exc:
            raise ManifestUnreadable(str(exc)) from None

    async def download(self, key: str, target: Path) -> None:
        """`key` streamed into `target` (created or truncated)."""
        with target.open("wb") as sink:
            async for chunk in await self.bucket.get(key):
                await asyncio.to_thread(sink.write, chunk)

    async def close(self) -> None:
        await self.bucket.close()


async def file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            yield chunk


__all__ = ["LeadershipUnknown", "ManifestUnreadable", "MemoryNode", "Standing", "file_chunks"]
