"""Alembic environment for Membridge's tables (version table `membridge_alembic_version`)."""

from bloom.db.alembic_env import run_migrations

run_migrations()
