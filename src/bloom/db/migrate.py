"""Alembic, driven from code: `bloom db upgrade`, migrate-on-start, and the tests use this.

Each `Schema` (the runtime's tables, `bloom.runtime.storage.schema`; Membridge's,
`bloom.membridge.storage.schema`) has its own scripts and its own version table, so both can
live in one database without stepping on each other.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, create_engine

from bloom.db.database import DatabaseTarget

# stdlib, not structlog: a server renders it in its format, a CLI command that migrates stays quiet
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Schema:
    """A set of tables with its migration scripts and version table."""

    script_location: Path
    metadata: MetaData
    version_table: str

    def alembic_config(self, target: DatabaseTarget) -> Config:
        config = Config()
        config.set_main_option("script_location", str(self.script_location))
        # Passed as attributes, not ini options: ini values treat "%" specially.
        config.attributes["sync_url"] = target.sync_url
        config.attributes["schema"] = self
        return config

    def upgrade(self, target: DatabaseTarget, revision: str = "head") -> None:
        """Bring the schema to `revision`. Safe to run from several processes at once on
        PostgreSQL (an advisory lock serialises them); a no-op when already there. Logs one
        line: what it migrated, or that there was nothing to."""
        before = self.current_revision(target)
        command.upgrade(self.alembic_config(target), revision)
        after = self.current_revision(target)
        if after == before:
            log.info("schema at %s, nothing to migrate", after)
        else:
            log.info("schema migrated from %s to %s", before or "empty", after)

    def current_revision(self, target: DatabaseTarget) -> str | None:
        engine = create_engine(target.sync_url)
        try:
            with engine.connect() as conn:
                context = MigrationContext.configure(
                    conn, opts={"version_table": self.version_table}
                )
                return context.get_current_revision()
        finally:
            engine.dispose()

    def head_revision(self) -> str | None:
        return ScriptDirectory(str(self.script_location)).get_current_head()
