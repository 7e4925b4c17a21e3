"""Where artifact content lives: inline in the database, or in files (S3 arrives later)."""

from bloom.artifacts.store import ArtifactStore, DatabaseStore, FileStore, StoredContent

__all__ = ["ArtifactStore", "DatabaseStore", "FileStore", "StoredContent"]
