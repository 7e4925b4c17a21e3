"""Membridge's place among the database schemas: its tables, scripts and version table."""

from pathlib import Path

from bloom.membridge.tables import metadata
from bloom.storage.migrate import Schema

SCHEMA = Schema(Path(__file__).parent / "migrations", metadata, "membridge_alembic_version")
"""Pass as `schema=` to `bloom.storage.migrate.upgrade`, `current_revision`, `head_revision`."""
