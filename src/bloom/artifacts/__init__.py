"""Where artifact content lives: inline in the database, in files, or in an S3 bucket."""

from bloom.artifacts.store import (
    ArtifactStore,
    ContentMissing,
    DatabaseStore,
    DigestMismatch,
    ExternalStore,
    FileStore,
    StoredContent,
    StoreUnavailable,
)

__all__ = [
    "ArtifactStore",
    "ContentMissing",
    "DatabaseStore",
    "DigestMismatch",
    "ExternalStore",
    "FileStore",
    "StoreUnavailable",
    "StoredContent",
]
