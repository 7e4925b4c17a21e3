"""The push lock (`locks/active.lock`): taken by compare-and-swap, released after the push, and
taken over once its TTL and grace have passed or its holder's leadership epoch is gone."""

from bloom.domain.memory import Keys, LockVerdict, PushLock, lock_verdict
from bloom.objects.errors import ObjectMissing, PreconditionFailed
from bloom.objects.s3 import S3Bucket


class LockHeld(Exception):
    """Another node is pushing."""


class PushLockStore:
    def __init__(self, bucket: S3Bucket, keys: Keys):
        self.bucket = bucket
        self.keys = keys

    async def read(self) -> tuple[PushLock | None, str | None]:
        try:
            found = await self.bucket.read(self.keys.lock)
        except ObjectMissing:
            return None, None
        try:
            return PushLock.from_json(found.data), found.etag
        except ValueError:  # unreadable: as good as stale, and replaced only by swap
            return PushLock("?", 0, "", self.keys.canonical_id), found.etag

    async def acquire(self, mine: PushLock, *, ttl: int, grace: int, force: bool) -> None:
        """Take the lock for `mine` or raise `LockHeld` (also when another node took it between
        our read and our write)."""
        current, etag = await self.read()
        verdict = lock_verdict(
            current,
            node_id=mine.holder(),
            epoch=mine.epoch,
            now=mine.timestamp,
            ttl=ttl,
            grace=grace,
            force=force,
        )
        if verdict is LockVerdict.HELD:
            assert current is not None
            age = mine.timestamp - current.timestamp
            raise LockHeld(f"push lock held by {current.holder()} ({age} s ago)")
        try:
            await self.bucket.swap(self.keys.lock, mine.to_json(), etag=etag)
        except PreconditionFailed:
            raise LockHeld("push lock taken by another node just now") from None

    async def release(self, mine: PushLock) -> None:
        """Remove the lock if it is still the one `mine` wrote."""
        current, _ = await self.read()
        if current == mine:
            await self.bucket.delete(self.keys.lock)
