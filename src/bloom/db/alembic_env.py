"""The Alembic environment every schema's `env.py` runs (PostgreSQL and SQLite alike)."""

from alembic import context
from sqlalchemy import create_engine, text

MIGRATION_LOCK_KEY = 0x626C6F6F6D  # "bloom": one migrator at a time per PostgreSQL database


def run_migrations() -> None:
    """Migrate the schema in `config.attributes["schema"]` on `config.attributes["sync_url"]`."""
    schema = context.config.attributes["schema"]
    engine = create_engine(context.config.attributes["sync_url"])
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
                    target_metadata=schema.metadata,
                    version_table=schema.version_table,
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
