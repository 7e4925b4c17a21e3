"""The runtime's place among the database schemas: its tables, scripts and version table."""

from pathlib import Path

from bloom.db.migrate import Schema
from bloom.runtime.storage.tables import metadata

SCHEMA = Schema(Path(__file__).parent / "migrations", metadata, "alembic_version")
