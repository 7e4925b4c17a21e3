"""The leadership lease in the bucket, written only by compare-and-swap (If-None-Match for the
first, If-Match on the ETag read for every later one), so two nodes bootstrapping or taking over
at once cannot both win: the loser's write is refused, it reads again and follows the winner.
Every write leaves an audit object beside the lease."""

from dataclasses import dataclass

import structlog

from bloom.domain.memory import Keys, Lease, Role, chosen_lease, lease_audit, next_lease
from bloom.objects.errors import ObjectMissing, ObjectStoreUnavailable, PreconditionFailed
from bloom.objects.s3 import S3Bucket

log = structlog.get_logger("bloom.memory")
ATTEMPTS = 8
"""Reads and writes before giving up: each lost race means another node's write succeeded."""


class LeadershipUnknown(Exception):
    """The lease cannot be read or settled: no role can be trusted (callers fail closed)."""


@dataclass(frozen=True, slots=True)
class Read:
    lease: Lease | None
    etag: str | None


class LeaseStore:
    def __init__(self, bucket: S3Bucket, keys: Keys):
        self.bucket = bucket
        self.keys = keys

    async def read(self) -> Read:
        """The lease and its ETag; (None, None) when there is none. `LeadershipUnknown` when it
        cannot be read or makes no sense (never taken as absent: that would bootstrap anew)."""
        try:
            found = await self.bucket.read(self.keys.lease)
        except ObjectMissing:
            return Read(None, None)
        except ObjectStoreUnavailable as exc:
            raise LeadershipUnknown(str(exc)) from None
        try:
            return Read(Lease.from_json(found.data), found.etag)
        except ValueError as exc:
            raise LeadershipUnknown(f"{self.keys.lease}: {exc}") from None

    async def resolve(
        self, *, node_id: str, preferred: str, lease_seconds: int, now: int
    ) -> tuple[Role, Lease]:
        """This node's role, after writing what `next_lease` says (bootstrap, renewal, takeover)
        if anything; a lost race is read again."""
        for _ in range(ATTEMPTS):
            read = await self.read()
            step = next_lease(
                read.lease,
                canonical_id=self.keys.canonical_id,
                node_id=node_id,
                preferred=preferred,
                lease_seconds=lease_seconds,
                now=now,
            )
            if step.write is None:
                assert read.lease is not None, "next_lease writes when there is no lease"
                return step.role, read.lease
            if await self._swap(read, step.write, node_id, now):
                return step.role, step.write
        raise LeadershipUnknown(f"{self.keys.lease}: still contended after {ATTEMPTS} attempts")

    async def choose(
        self, *, primary_node_id: str, lease_seconds: int, issued_by: str, now: int, min_epoch: int
    ) -> Lease:
        """An operator's choice of primary, written over whatever lease is there (next epoch)."""
        for _ in range(ATTEMPTS):
            read = await self.read()
            lease = chosen_lease(
                read.lease,
                canonical_id=self.keys.canonical_id,
                primary_node_id=primary_node_id,
                lease_seconds=lease_seconds,
                issued_by=issued_by,
                now=now,
                min_epoch=min_epoch,
            )
            if await self._swap(read, lease, issued_by, now, event="lease_selected"):
                return lease
        raise LeadershipUnknown(f"{self.keys.lease}: still contended after {ATTEMPTS} attempts")

    async def _swap(
        self, read: Read, lease: Lease, by: str, now: int, event: str = "lease_written"
    ) -> bool:
        try:
            await self.bucket.swap(self.keys.lease, lease.to_json(), etag=read.etag)
        except PreconditionFailed:
            return False
        except ObjectStoreUnavailable as exc:
            raise LeadershipUnknown(str(exc)) from None
        try:
            await self.bucket.put_bytes(
                self.keys.audit(now, by, lease.epoch),
                lease_audit(lease, event, now),
                content_type="application/json",
            )
        except ObjectStoreUnavailable as exc:  # the lease stands; the gap is logged
            log.warning("lease_audit_failed", lease=self.keys.lease, error=str(exc))
        return True
