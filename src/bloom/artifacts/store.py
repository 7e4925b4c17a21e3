"""Artifact content stores. Content is addressed by its SHA-256, so writing the same output twice
(a retried complete) stores it once, and nothing written is ever changed."""

import asyncio
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredContent:
    """Where a piece of content went: the artifact row's `storage`, `url` and inline `content`."""

    storage: str
    url: str | None
    content: str | None
    sha256: str
    size_bytes: int


class ArtifactStore(Protocol):
    kind: str

    async def put(self, content: str) -> StoredContent:
        """Store `content`; called before the completing transaction, so it must be idempotent."""
        ...

    async def read(self, sha256: str) -> bytes:
        """The bytes stored under `sha256` (content kept outside the database)."""
        ...


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DatabaseStore:
    """Content inline in `runtime_artifacts.content`, as the seed keeps it."""

    kind = "db"

    async def put(self, content: str) -> StoredContent:
        data = content.encode()
        return StoredContent("db", None, content, _digest(data), len(data))

    async def read(self, sha256: str) -> bytes:
        raise LookupError("database-stored content is read from its row")


class FileStore:
    """Content in files under a directory, one per SHA-256, written atomically."""

    kind = "fs"

    def __init__(self, root: Path):
        self.root = root.resolve()

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    async def put(self, content: str) -> StoredContent:
        data = content.encode()
        sha256 = _digest(data)
        path = self._path(sha256)
        if not path.exists():
            await asyncio.to_thread(_write_atomically, path, data)
        return StoredContent("fs", f"fs://{sha256}", None, sha256, len(data))

    async def read(self, sha256: str) -> bytes:
        return await asyncio.to_thread(self._path(sha256).read_bytes)


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
