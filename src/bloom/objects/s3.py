"""An S3 bucket over aiobotocore: streamed puts (multipart beyond one part), ranged streamed gets,
and two errors a caller can act on: the object is missing, or the store cannot serve now.

The client is made on first use and kept; botocore reconnects by itself after an outage. Path-style
addressing and checksums only when required, as S3-compatible servers (MinIO, moto) expect.
"""

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from bloom.objects.settings import ObjectStoreSettings

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

PART_SIZE = 8 * 1024 * 1024
"""Content up to this size goes in one PutObject; beyond it, in multipart parts of this size."""
READ_CHUNK = 256 * 1024
MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


class ObjectStoreUnavailable(Exception):
    """The store could not be reached, timed out or refused the request (credentials, 5xx)."""


class ObjectMissing(Exception):
    """No object under that key."""


class DigestMismatch(Exception):
    """The streamed content's SHA-256 is not the one expected; nothing was stored."""


@dataclass(frozen=True, slots=True)
class PutResult:
    sha256: str
    size_bytes: int
    created: bool = True
    """False when `if_absent` found an object already under the key (and kept it)."""


class S3Bucket:
    """One bucket of an S3-compatible service."""

    def __init__(self, settings: ObjectStoreSettings, *, part_size: int = PART_SIZE):
        self.endpoint = settings.s3_endpoint_url
        self.bucket = settings.s3_bucket
        self.region = settings.s3_region
        self.part_size = part_size
        self._settings = settings
        self._client: S3Client | None = None
        self._exit = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._bucket_ready = False

    async def _s3(self) -> "S3Client":
        async with self._lock:
            if self._client is None:
                timeout = self._settings.s3_timeout_sec
                config = AioConfig(
                    s3={"addressing_style": "path"},
                    connect_timeout=timeout,
                    read_timeout=timeout,
                    retries={"max_attempts": 2, "mode": "standard"},
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                    max_pool_connections=50,
                )
                self._client = await self._exit.enter_async_context(
                    get_session().create_client(
                        "s3",
                        endpoint_url=self.endpoint,
                        region_name=self.region,
                        aws_access_key_id=self._settings.s3_access_key.get_secret_value(),
                        aws_secret_access_key=self._settings.s3_secret_key.get_secret_value(),
                        config=config,
                    )
                )
            return self._client

    async def close(self) -> None:
        await self._exit.aclose()
        self._client = None

    @contextlib.asynccontextmanager
    async def _translated(self, what: str) -> AsyncIterator[None]:
        """botocore's and aiohttp's errors as this module's two."""
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in MISSING_CODES or status == 404:
                raise ObjectMissing(f"{what}: not found") from None
            raise ObjectStoreUnavailable(
                f"object store {self.endpoint} refused {what}: {code or status}"
            ) from None
        except (BotoCoreError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ObjectStoreUnavailable(
                f"object store {self.endpoint} unreachable ({what}): {type(exc).__name__}"
            ) from None

    async def ensure_bucket(self) -> None:
        """Create the bucket when it is missing; a no-op once it was seen."""
        if self._bucket_ready:
            return
        s3 = await self._s3()
        try:
            async with self._translated(f"bucket {self.bucket}"):
                await s3.head_bucket(Bucket=self.bucket)
        except ObjectMissing:
            async with self._translated(f"creating bucket {self.bucket}"):
                try:
                    if self.region == "us-east-1":
                        await s3.create_bucket(Bucket=self.bucket)
                    else:
                        await s3.create_bucket(
                            Bucket=self.bucket,
                            CreateBucketConfiguration={"LocationConstraint": self.region},  # type: ignore[typeddict-item]
                        )
                except ClientError as exc:  # another process made it first
                    if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                        raise
        self._bucket_ready = True

    async def exists(self, key: str) -> bool:
        try:
            await self.metadata(key)
        except ObjectMissing:
            return False
        return True

    async def metadata(self, key: str) -> dict[str, str]:
        """The user metadata stored with `key` (`x-amz-meta-*`); `ObjectMissing` if none."""
        s3 = await self._s3()
        async with self._translated(key):
            head = await s3.head_object(Bucket=self.bucket, Key=key)
        return dict(head.get("Metadata", {}))

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = "application/octet-stream",
        expected_sha256: str | None = None,
        if_absent: bool = False,
        metadata: dict[str, str] | None = None,
    ) -> PutResult:
        """Stream `chunks` to `key`, holding at most one part in memory. With `expected_sha256`,
        content that does not match is not stored (`DigestMismatch`). With `if_absent`, an
        object already under `key` is kept as it is (content-addressed keys: the same bytes)."""
        await self.ensure_bucket()
        s3 = await self._s3()
        digest = hashlib.sha256()
        buffer = bytearray()
        size = 0
        upload: dict[str, Any] | None = None
        parts: list[dict[str, Any]] = []
        present = False  # a large object found already stored: the rest is only hashed
        try:
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                if present:
                    continue
                buffer += chunk
                if len(buffer) >= self.part_size:
                    if upload is None and if_absent and await self.exists(key):
                        present, buffer = True, bytearray()
                        continue
                    upload = upload or await self._start_multipart(
                        s3, key, content_type, metadata or {}
                    )
                    parts.append(await self._upload_part(s3, key, upload, len(parts) + 1, buffer))
                    buffer = bytearray()
            sha256 = digest.hexdigest()
            if expected_sha256 is not None and sha256 != expected_sha256:
                raise DigestMismatch(f"{key}: content hashes to {sha256}, not {expected_sha256}")
            if present:
                return PutResult(sha256, size, created=False)
            if upload is None:
                created = await self._put_object(
                    s3, key, bytes(buffer), content_type, if_absent, metadata or {}
                )
                return PutResult(sha256, size, created)
            if buffer:
                parts.append(await self._upload_part(s3, key, upload, len(parts) + 1, buffer))
            async with self._translated(f"complete upload of {key}"):
                await s3.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload["UploadId"],
                    MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                )
            upload = None
            return PutResult(sha256, size)
        finally:
            if upload is not None:  # failed half-way: leave no parts behind
                with contextlib.suppress(Exception):
                    await s3.abort_multipart_upload(
                        Bucket=self.bucket, Key=key, UploadId=upload["UploadId"]
                    )

    async def _put_object(
        self,
        s3: "S3Client",
        key: str,
        data: bytes,
        content_type: str,
        if_absent: bool,
        metadata: dict[str, str],
    ) -> bool:
        """One PutObject; with `if_absent`, conditional (`If-None-Match: *`, one round trip).
        Whether it created the object."""
        condition = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            async with self._translated(f"put {key}"):
                try:
                    await s3.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=data,
                        ContentType=content_type,
                        Metadata=metadata,
                        **condition,  # type: ignore[arg-type]
                    )
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "PreconditionFailed":
                        raise
                    return False
        except ObjectMissing:  # the bucket went away under us: make it again, once
            self._bucket_ready = False
            await self.ensure_bucket()
            return await self._put_object(s3, key, data, content_type, if_absent, metadata)
        return True

    async def _start_multipart(
        self, s3: "S3Client", key: str, content_type: str, metadata: dict[str, str]
    ) -> dict[str, Any]:
        async with self._translated(f"start upload of {key}"):
            return dict(
                await s3.create_multipart_upload(
                    Bucket=self.bucket, Key=key, ContentType=content_type, Metadata=metadata
                )
            )

    async def _upload_part(
        self, s3: "S3Client", key: str, upload: dict[str, Any], number: int, data: bytearray
    ) -> dict[str, Any]:
        async with self._translated(f"upload part {number} of {key}"):
            part = await s3.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload["UploadId"],
                PartNumber=number,
                Body=bytes(data),
            )
        return {"ETag": part["ETag"], "PartNumber": number}

    async def get(
        self, key: str, first: int = 0, last: int | None = None, *, bucket: str | None = None
    ) -> AsyncIterator[bytes]:
        """The bytes `first`..`last` (inclusive; `None`: to the end) of `key`, streamed. The
        request is made here, so a missing object or an outage is raised before any byte."""
        s3 = await self._s3()
        ranged = {"Range": f"bytes={first}-{'' if last is None else last}"}
        async with self._translated(f"get {key}"):
            response = await s3.get_object(
                Bucket=bucket or self.bucket,
                Key=key,
                **(ranged if first or last is not None else {}),  # type: ignore[arg-type]
            )
        return _drain(response["Body"])


async def _drain(body: Any) -> AsyncIterator[bytes]:
    try:
        async for chunk in body.iter_chunks(READ_CHUNK):
            yield chunk
    finally:
        body.close()
