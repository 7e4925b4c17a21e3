"""Alembic environment for the runtime's tables (PostgreSQL and SQLite)."""

from alembic import context
from sqlalchemy import create_engine, text

from bloom.storage.tables import metadata

MIGRATION_LOCK_KEY = 0x626C6F6F6D  # "bloom": one migrator at a time per PostgreSQL database


def run_migrations_online() -> None:
    url = context.config.attributes["sync_url"]
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            is_sqlite = connection.dialect.name == "sqlite"
            if not is_sqlite:
                connection.execute(
                    text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
                connection.commit()
            try:
                context.configure(
                    connection=connection,
                    target_metadata=metadata,
                    render_as_batch=is_sqlite,
                    compare_type=True,
                )
                with context.begin_transaction():
                    context.run_migrations()
            finally:
                if not is_sqlite:
                    connection.execute(
                        text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY}
                    )
                    connection.commit()
    finally:
        engine.dispose()


run_migrations_online()
