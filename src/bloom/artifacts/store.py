"""Artifact content stores. Content is addressed by its SHA-256, so writing the same output twice
(a retried complete) stores it once, and nothing written is ever changed."""

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from bloom.domain.models import Artifact

READ_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class StoredContent:
    """Where a piece of content went: the artifact row's `storage`, `url` and inline `content`."""

    storage: str
    url: str | None
    content: str | None
    sha256: str
    size_bytes: int


class StoreUnavailable(Exception):
    """The store cannot take or give content right now (an outage); worth retrying later."""


class ContentMissing(Exception):
    """The store holds nothing under that address."""


class DigestMismatch(Exception):
    """Content being moved does not hash to the SHA-256 recorded for it; nothing was stored."""


class ArtifactStore(Protocol):
    kind: str

    async def put(self, content: str) -> StoredContent:
        """Store `content`; called before the completing transaction, so it must be idempotent."""
        ...

    async def open(
        self, sha256: str, url: str | None, first: int, last: int
    ) -> AsyncIterator[bytes]:
        """Bytes `first`..`last` (inclusive) of content kept outside the database. Raises
        `ContentMissing` or `StoreUnavailable` before the first byte."""
        ...

    async def close(self) -> None:
        """Let go of connections, if any."""
        ...


@runtime_checkable
class ExternalStore(ArtifactStore, Protocol):
    """A store outside the database, which content can be moved into (`bloom artifacts
    migrate`)."""

    async def put_stream(self, chunks: AsyncIterable[bytes], sha256: str) -> StoredContent:
        """Store streamed content known by its SHA-256; `DigestMismatch` if it hashes otherwise."""
        ...


def content_size(artifact: Artifact) -> int:
    """How many bytes an artifact's content has, wherever it lives; `ContentMissing` if it has
    none (an artifact written without a digest by an old version)."""
    if artifact.content is not None:
        return len(artifact.content.encode())
    if artifact.sha256 is None or artifact.size_bytes is None:
        raise ContentMissing(f"artifact {artifact.id} has no content")
    return artifact.size_bytes


async def open_content(
    stores: Mapping[str, ArtifactStore], artifact: Artifact, first: int, last: int
) -> AsyncIterator[bytes]:
    """Bytes `first`..`last` (inclusive) of an artifact's content: from its row, or from the
    store that holds it. `ContentMissing` or `StoreUnavailable` before the first byte."""
    if artifact.content is not None:
        return one_chunk(artifact.content.encode()[first : last + 1])
    store = stores.get(artifact.storage or "")
    if store is None or artifact.sha256 is None:
        raise ContentMissing(f"artifact {artifact.id}: no store '{artifact.storage}'")
    return await store.open(artifact.sha256, artifact.url, first, last)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DatabaseStore:
    """Content inline in `runtime_artifacts.content`, as the seed keeps it."""

    kind = "db"

    async def put(self, content: str) -> StoredContent:
        data = content.encode()
        return StoredContent("db", None, content, digest(data), len(data))

    async def open(
        self, sha256: str, url: str | None, first: int, last: int
    ) -> AsyncIterator[bytes]:
        raise ContentMissing("database-stored content is read from its row")

    async def close(self) -> None:
        return None


class FileStore:
    """Content in files under a directory, one per SHA-256, written atomically."""

    kind = "fs"

    def __init__(self, root: Path):
        self.root = root.resolve()

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def _stored(self, sha256: str, size: int) -> StoredContent:
        return StoredContent("fs", f"fs://{sha256}", None, sha256, size)

    async def put(self, content: str) -> StoredContent:
        data = content.encode()
        return await self.put_stream(one_chunk(data), digest(data))

    async def put_stream(self, chunks: AsyncIterable[bytes], sha256: str) -> StoredContent:
        path = self._path(sha256)
        if path.exists():
            return self._stored(sha256, path.stat().st_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        hasher, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as handle:
                async for chunk in chunks:
                    hasher.update(chunk)
                    size += len(chunk)
                    await asyncio.to_thread(handle.write, chunk)
                await asyncio.to_thread(_flush, handle)
            if hasher.hexdigest() != sha256:
                raise DigestMismatch(f"content for {sha256} hashes to {hasher.hexdigest()}")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return self._stored(sha256, size)

    async def open(
        self, sha256: str, url: str | None, first: int, last: int
    ) -> AsyncIterator[bytes]:
        try:
            handle = await asyncio.to_thread(self._path(sha256).open, "rb")
        except FileNotFoundError:
            raise ContentMissing(f"no file for {sha256}") from None
        return _read_file(handle, first, last)

    async def close(self) -> None:
        return None


async def _read_file(handle: BinaryIO, first: int, last: int) -> AsyncIterator[bytes]:
    try:
        await asyncio.to_thread(handle.seek, first)
        left = last - first + 1
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(READ_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
    finally:
        handle.close()


def _flush(handle: BinaryIO) -> None:
    handle.flush()
    os.fsync(handle.fileno())


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data
