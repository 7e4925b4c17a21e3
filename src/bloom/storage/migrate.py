"""Alembic, driven from code: `bloom db upgrade` and the runtime's migrate-on-start use this."""

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from bloom.storage.database import DatabaseTarget

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(target: DatabaseTarget) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: ini values treat "%" specially.
    config.attributes["sync_url"] = target.sync_url
    return config


def upgrade(target: DatabaseTarget, revision: str = "head") -> None:
    """Bring the schema to `revision`. Safe to run from several processes at once on PostgreSQL
    (an advisory lock serialises them); a no-op when already there."""
    command.upgrade(alembic_config(target), revision)


def current_revision(target: DatabaseTarget) -> str | None:
    engine = create_engine(target.sync_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
