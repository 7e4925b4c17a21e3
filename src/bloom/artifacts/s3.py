"""Artifact content in an S3-compatible bucket (MinIO in the seeds' deployment): the object key is
`artifacts/sha256/<2 hex>/<sha256>`, the artifact's `url` is `s3://<bucket>/<key>`."""

from collections.abc import AsyncIterable, AsyncIterator
from urllib.parse import urlsplit

from bloom.artifacts.store import (
    ContentMissing,
    DigestMismatch,
    StoredContent,
    StoreUnavailable,
    digest,
    one_chunk,
)
from bloom.objects import errors, s3

KEY_PREFIX = "artifacts/sha256"


def object_key(sha256: str) -> str:
    return f"{KEY_PREFIX}/{sha256[:2]}/{sha256}"


class S3Store:
    kind = "s3"

    def __init__(self, bucket: s3.S3Bucket):
        self.bucket = bucket

    async def put(self, content: str) -> StoredContent:
        data = content.encode()
        return await self.put_stream(one_chunk(data), digest(data))

    async def put_stream(self, chunks: AsyncIterable[bytes], sha256: str) -> StoredContent:
        key = object_key(sha256)
        try:
            put = await self.bucket.put(
                key,
                chunks,
                content_type="application/octet-stream",
                expected_sha256=sha256,
                if_absent=True,
            )
        except errors.ObjectStoreUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None
        except errors.DigestMismatch as exc:
            raise DigestMismatch(str(exc)) from None
        return StoredContent(
            "s3", f"s3://{self.bucket.bucket}/{key}", None, put.sha256, put.size_bytes
        )

    async def open(
        self, sha256: str, url: str | None, first: int, last: int
    ) -> AsyncIterator[bytes]:
        bucket, key = self.bucket.bucket, object_key(sha256)
        if url and url.startswith("s3://"):  # where it was put, even if the bucket setting moved
            parts = urlsplit(url)
            bucket, key = parts.netloc, parts.path.lstrip("/")
        try:
            return await self.bucket.get(key, first, last, bucket=bucket)
        except errors.ObjectMissing:
            raise ContentMissing(f"no object {key} in bucket {bucket}") from None
        except errors.ObjectStoreUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None

    async def close(self) -> None:
        await self.bucket.close()
