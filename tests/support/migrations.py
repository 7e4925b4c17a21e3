"""An empty database of either kind for a migration test to walk up and down."""

import uuid
from pathlib import Path

import psycopg
import pytest

from bloom.db.database import DatabaseTarget, resolve_database
from tests.support.postgres import PostgresCluster


def empty_database(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> DatabaseTarget:
    """A new SQLite file, or a new database in the session's PostgreSQL cluster."""
    if kind == "sqlite":
        return resolve_database(f"sqlite:///{tmp_path / 'm.db'}", tmp_path)
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return resolve_database(cluster.url(name), tmp_path)
