"""Alembic, driven from code: `bloom db upgrade`, migrate-on-start, and the tests use this.

Each `Schema` (the runtime's tables; Membridge's) has its own scripts and its own version table,
so both can live in one database without stepping on each other.
"""

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, create_engine

from bloom.storage import tables
from bloom.storage.database import DatabaseTarget


@dataclass(frozen=True, slots=True)
class Schema:
    """A set of tables with its migration scripts and version table."""

    script_location: Path
    metadata: MetaData
    version_table: str


RUNTIME = Schema(Path(__file__).parent / "migrations", tables.metadata, "alembic_version")


def alembic_config(target: DatabaseTarget, schema: Schema = RUNTIME) -> Config:
    config = Config()
    config.set_main_option("script_location", str(schema.script_location))
    # Passed as attributes, not ini options: ini values treat "%" specially.
    config.attributes["sync_url"] = target.sync_url
    config.attributes["schema"] = schema
    return config


def upgrade(target: DatabaseTarget, revision: str = "head", *, schema: Schema = RUNTIME) -> None:
    """Bring the schema to `revision`. Safe to run from several processes at once on PostgreSQL
    (an advisory lock serialises them); a no-op when already there."""
    command.upgrade(alembic_config(target, schema), revision)


def current_revision(target: DatabaseTarget, *, schema: Schema = RUNTIME) -> str | None:
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": schema.version_table})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head_revision(schema: Schema = RUNTIME) -> str | None:
    return ScriptDirectory(str(schema.script_location)).get_current_head()
