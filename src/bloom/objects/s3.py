"""An S3 bucket: conditional puts (multipart beyond one part, aborted on a wrong digest), ranged
streamed gets, user metadata; and the two errors a caller can act on: the object is missing, or
the store cannot serve now.

Objects go through obstore (Rust: a put costs the event loop about a quarter of what botocore's
does, measured in docs/decisions.md), the bucket's creation through aiobotocore, loaded only for
that. Path-style addressing, as S3-compatible servers (MinIO, moto) expect.
"""

import asyncio
import hashlib
import sys
import threading
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import S3Store

from bloom.objects.errors import (
    DigestMismatch,
    ObjectMissing,
    ObjectStoreUnavailable,
    PreconditionFailed,
)
from bloom.objects.settings import ObjectStoreSettings

if TYPE_CHECKING:
    from obstore import Attributes

PART_SIZE = 8 * 1024 * 1024
"""Content up to this size goes in one PutObject; beyond it, in multipart parts of this size."""
READ_CHUNK = 256 * 1024
SETTLE_CHECKS = 2000
"""How often `close` looks whether obstore's threads are out of Python, 1 ms apart or more: it
gives up after 2 s at least (`_settled`)."""
MISSING = (NotFoundError, FileNotFoundError)
"""obstore raises either for a missing object (or bucket)."""
FAILED = (BaseError, OSError)
"""Anything else obstore raises: its own errors, and the builtins it maps some to (timeouts,
refused connections, permissions)."""


@dataclass(frozen=True, slots=True)
class Versioned:
    """A small object's bytes and the ETag they were read with (for a compare-and-swap)."""

    data: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class PutResult:
    sha256: str
    size_bytes: int
    created: bool = True
    """False when `if_absent` found an object already under the key (and kept it)."""


class S3Bucket:
    """One bucket of an S3-compatible service (and, for reading, others of the same service)."""

    def __init__(self, settings: ObjectStoreSettings, *, part_size: int = PART_SIZE):
        self.endpoint = settings.s3_endpoint_url
        self.bucket = settings.s3_bucket
        self.region = settings.s3_region
        self.part_size = part_size
        self._settings = settings
        self._stores: dict[str, S3Store] = {}
        self._bucket_ready = False
        self._creating = asyncio.Lock()

    def _store(self, bucket: str | None = None) -> S3Store:
        name = bucket or self.bucket
        if name not in self._stores:
            timeout = timedelta(seconds=self._settings.s3_timeout_sec)
            self._stores[name] = S3Store(
                name,
                endpoint=self.endpoint,
                region=self.region,
                access_key_id=self._settings.s3_access_key.get_secret_value(),
                secret_access_key=self._settings.s3_secret_key.get_secret_value(),
                virtual_hosted_style_request=False,
                client_options={
                    "allow_http": True,
                    "connect_timeout": timeout,
                    "timeout": timeout,
                },
                retry_config={"max_retries": 1, "retry_timeout": timeout * 2},
            )
        return self._stores[name]

    async def close(self) -> None:
        self._stores.clear()  # obstore's connection pools go with their stores
        await _settled()

    def _unavailable(self, what: str, exc: BaseException) -> ObjectStoreUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ObjectStoreUnavailable(f"object store {self.endpoint} failed ({what}): {reason}")

    async def ensure_bucket(self) -> None:
        """Create the bucket when it is missing; a no-op once it was seen."""
        if self._bucket_ready:
            return
        async with self._creating:
            if not self._bucket_ready:
                await _create_bucket(self._settings, self.endpoint, self.bucket, self.region)
                self._bucket_ready = True

    async def exists(self, key: str) -> bool:
        try:
            await self.metadata(key)
        except ObjectMissing:
            return False
        return True

    async def metadata(self, key: str) -> dict[str, str]:
        """The user metadata stored with `key` (`x-amz-meta-*`); `ObjectMissing` if none."""
        try:
            head = await obstore.get_async(self._store(), key, options={"head": True})
        except MISSING:
            raise ObjectMissing(f"{key}: not found") from None
        except FAILED as exc:
            raise self._unavailable(f"head {key}", exc) from None
        return {str(name).lower(): str(value) for name, value in head.attributes.items()}

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
        attributes: Attributes = {"Content-Type": content_type, **(metadata or {})}
        stream = aiter(chunks)
        first = bytearray()
        async for chunk in stream:
            first += chunk
            if len(first) > self.part_size:
                break
        else:  # it all fits in one part
            sha256 = _checked(hashlib.sha256(first).hexdigest(), expected_sha256, key)
            created = await self._put_once(key, bytes(first), attributes, if_absent)
            return PutResult(sha256, len(first), created)
        if if_absent and await self.exists(key):
            digest, size = hashlib.sha256(first), len(first)
            async for chunk in stream:  # kept as it is: only hashed
                digest.update(chunk)
                size += len(chunk)
            return PutResult(_checked(digest.hexdigest(), expected_sha256, key), size, False)
        hashed = _Hashed(first, stream, expected_sha256)
        try:
            await obstore.put_async(
                self._store(),
                key,
                hashed,
                attributes=attributes,
                use_multipart=True,
                chunk_size=self.part_size,
                max_concurrency=2,
            )
        except DigestMismatch:  # raised by the stream at its end: the upload was aborted
            raise
        except FAILED as exc:
            raise self._unavailable(f"upload of {key}", exc) from None
        return PutResult(hashed.sha256, hashed.size)

    async def put_bytes(
        self, key: str, data: bytes, *, content_type: str = "application/octet-stream"
    ) -> None:
        """One small object, written whole (unconditionally)."""
        await self._put_once(key, data, {"Content-Type": content_type}, if_absent=False)

    async def _put_once(
        self, key: str, data: bytes, attributes: "Attributes", if_absent: bool
    ) -> bool:
        """One PutObject; with `if_absent`, conditional (`If-None-Match: *`, one round trip).
        Whether it created the object."""
        try:
            await obstore.put_async(
                self._store(),
                key,
                data,
                attributes=attributes,
                mode="create" if if_absent else "overwrite",
                use_multipart=False,
            )
        except AlreadyExistsError:
            return False
        except MISSING:  # the bucket went away under us: make it again, once
            self._bucket_ready = False
            await self.ensure_bucket()
            return await self._put_once(key, data, attributes, if_absent)
        except FAILED as exc:
            raise self._unavailable(f"put {key}", exc) from None
        return True

    async def read(self, key: str) -> Versioned:
        """A small object whole, with its ETag; `ObjectMissing` if none."""
        try:
            result = await obstore.get_async(self._store(), key)
            data = bytes(await result.bytes_async())
        except MISSING:
            raise ObjectMissing(f"{key}: not found") from None
        except FAILED as exc:
            raise self._unavailable(f"get {key}", exc) from None
        return Versioned(data, str(result.meta["e_tag"] or ""))

    async def swap(
        self, key: str, data: bytes, *, etag: str | None, content_type: str = "application/json"
    ) -> str:
        """Compare-and-swap: write `data` only if the object still has `etag` (If-Match), or,
        with `etag=None`, only if there is none (If-None-Match: *). The new ETag;
        `PreconditionFailed` when another writer came first."""
        mode: Any = "create" if etag is None else {"e_tag": etag}
        try:
            put = await obstore.put_async(
                self._store(),
                key,
                data,
                attributes={"Content-Type": content_type},
                mode=mode,
                use_multipart=False,
            )
        except (AlreadyExistsError, PreconditionError):
            raise PreconditionFailed(f"{key}: changed by another writer") from None
        except MISSING:  # no bucket yet: make it, once
            if self._bucket_ready:
                raise self._unavailable(f"put {key}", FileNotFoundError("no bucket")) from None
            await self.ensure_bucket()
            return await self.swap(key, data, etag=etag, content_type=content_type)
        except FAILED as exc:
            raise self._unavailable(f"put {key}", exc) from None
        return str(put["e_tag"] or "")

    async def copy(self, source: str, target: str) -> None:
        """Server-side copy of `source` over `target` (no bytes pass through here)."""
        try:
            await obstore.copy_async(self._store(), source, target)
        except MISSING:
            raise ObjectMissing(f"{source}: not found") from None
        except FAILED as exc:
            raise self._unavailable(f"copy {source}", exc) from None

    async def delete(self, key: str) -> None:
        """Remove `key` (no error when it is already gone)."""
        try:
            await obstore.delete_async(self._store(), key)
        except MISSING:
            return
        except FAILED as exc:
            raise self._unavailable(f"delete {key}", exc) from None

    async def get(
        self, key: str, first: int = 0, last: int | None = None, *, bucket: str | None = None
    ) -> AsyncIterator[bytes]:
        """The bytes `first`..`last` (inclusive; `None`: to the end) of `key`, streamed. The
        request is made here, so a missing object or an outage is raised before any byte."""
        options: dict[str, Any] = {}
        if last is not None:
            options["range"] = (first, last + 1)
        elif first:
            options["range"] = {"offset": first}
        try:
            result = await obstore.get_async(self._store(bucket), key, options=options)  # type: ignore[arg-type]
        except MISSING:
            raise ObjectMissing(f"{key}: not found") from None
        except FAILED as exc:
            raise self._unavailable(f"get {key}", exc) from None
        return self._drain(result.stream(min_chunk_size=READ_CHUNK), key)

    async def _drain(self, stream: AsyncIterable[Any], key: str) -> AsyncIterator[bytes]:
        try:
            async for chunk in stream:
                yield bytes(chunk)
        except FAILED as exc:
            raise self._unavailable(f"read of {key}", exc) from None


class _Hashed:
    """A stream's bytes (after a first part already read), hashed on the way; at its end, when
    the digest is not the expected one, it raises instead of ending, so the upload is aborted."""

    def __init__(self, first: bytearray, rest: AsyncIterator[bytes], expected: str | None):
        self._first: bytes | None = bytes(first)
        self._rest = rest
        self._expected = expected
        self._digest = hashlib.sha256(first)
        self.size = len(first)

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def __aiter__(self) -> "_Hashed":
        return self

    async def __anext__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        try:
            chunk = await anext(self._rest)
        except StopAsyncIteration:
            _checked(self.sha256, self._expected, "streamed content")
            raise
        self._digest.update(chunk)
        self.size += len(chunk)
        return chunk


async def _settled() -> None:
    """Return once no thread foreign to `threading` (obstore's tokio threads) runs Python code
    (or after `SETTLE_CHECKS` looks). Such a thread completes an awaited call with
    `call_soon_threadsafe`, whose write to the loop's wake-up socket lets go of the GIL: the
    coroutine can resume and the process end before the thread takes the GIL back. A thread
    taking it while the interpreter finalizes leaves by `pthread_exit`, whose unwinding through
    Rust frames aborts the whole process (SIGABRT; CPython before 3.14, python/cpython#87135)."""
    for _ in range(SETTLE_CHECKS):
        if not _foreign_threads_in_python():
            return
        await asyncio.sleep(0.001)  # the GIL is free meanwhile: they finish


def _foreign_threads_in_python() -> bool:
    ours = {thread.ident for thread in threading.enumerate()}
    return any(ident not in ours for ident in sys._current_frames())


def _checked(sha256: str, expected: str | None, key: str) -> str:
    if expected is not None and sha256 != expected:
        raise DigestMismatch(f"{key}: content hashes to {sha256}, not {expected}")
    return sha256


async def _create_bucket(
    settings: ObjectStoreSettings, endpoint: str, bucket: str, region: str
) -> None:
    """HeadBucket, and CreateBucket when it is missing (aiobotocore: a cold path, once)."""
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session
    from botocore.exceptions import BotoCoreError, ClientError

    timeout = settings.s3_timeout_sec
    config = AioConfig(
        s3={"addressing_style": "path"},
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"max_attempts": 2, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    try:
        async with get_session().create_client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=settings.s3_access_key.get_secret_value(),
            aws_secret_access_key=settings.s3_secret_key.get_secret_value(),
            config=config,
        ) as s3:
            try:
                await s3.head_bucket(Bucket=bucket)
                return
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                    raise
            where = {} if region == "us-east-1" else {"LocationConstraint": region}
            try:
                if where:
                    await s3.create_bucket(Bucket=bucket, CreateBucketConfiguration=where)  # type: ignore[arg-type]
                else:
                    await s3.create_bucket(Bucket=bucket)
            except ClientError as exc:  # another process made it first
                if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                    raise
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise ObjectStoreUnavailable(
            f"object store {endpoint} refused bucket {bucket}: {code}"
        ) from None
    except (BotoCoreError, OSError, TimeoutError) as exc:
        raise ObjectStoreUnavailable(
            f"object store {endpoint} unreachable (bucket {bucket}): {type(exc).__name__}"
        ) from None
