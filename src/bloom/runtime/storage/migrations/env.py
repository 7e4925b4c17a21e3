"""Alembic environment for the runtime's tables."""

from bloom.db.alembic_env import run_migrations

run_migrations()
