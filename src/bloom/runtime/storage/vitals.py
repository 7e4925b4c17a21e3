"""What a long run does to the database, for `bloom bench --soak`: connections held, bytes on
disk, and per table its live and dead rows (PostgreSQL's statistics views; SQLite has no dead
rows, only free pages). Synchronous, on a connection of its own: run it in a thread."""

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, text

from bloom.db.database import DatabaseTarget, StorageKind
from bloom.runtime.storage.bulk import connect


@dataclass(frozen=True, slots=True)
class TableVitals:
    name: str
    live_rows: int
    bytes: int | None
    """With its indexes and TOAST (PostgreSQL); None on SQLite, which keeps one file."""
    dead_rows: int | None
    """Old row versions not yet vacuumed (PostgreSQL's estimate); None on SQLite."""
    vacuums: int | None
    """Vacuums so far, autovacuum's and manual ones (PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class DatabaseVitals:
    connections: int | None
    """Other sessions on this database (PostgreSQL); None on SQLite, where they are files."""
    bytes: int
    """The whole database: PostgreSQL's database size, or SQLite's file and write-ahead log."""
    free_bytes: int | None
    """SQLite's free pages (space deleted rows left, kept for reuse); None on PostgreSQL."""
    tables: list[TableVitals]


_PG_TABLES = text(
    "SELECT relname, n_live_tup, pg_total_relation_size(relid), n_dead_tup,"
    " autovacuum_count + vacuum_count FROM pg_stat_user_tables ORDER BY relname"
)
_PG_CONNECTIONS = text(
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
_PG_SIZE = text("SELECT pg_database_size(current_database())")
_SQLITE_TABLES = text(
    "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
)


def read_vitals(target: DatabaseTarget) -> DatabaseVitals:
    with connect(target) as conn:
        if target.kind is StorageKind.POSTGRESQL:
            tables = [
                TableVitals(name, live, size, dead, vacuums)
                for name, live, size, dead, vacuums in conn.execute(_PG_TABLES)
            ]
            connections = conn.execute(_PG_CONNECTIONS).scalar_one()
            return DatabaseVitals(connections, conn.execute(_PG_SIZE).scalar_one(), None, tables)
        names = list(conn.execute(_SQLITE_TABLES).scalars())
        tables = [TableVitals(name, _count(conn, name), None, None, None) for name in names]
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
    wal = Path(f"{target.dsn}-wal")
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    return DatabaseVitals(None, pages * page_size + wal_bytes, free * page_size, tables)


def _count(conn: Connection, table: str) -> int:
    # The name comes from sqlite_schema, never from a caller.
    return int(conn.exec_driver_sql(f'SELECT count(*) FROM "{table}"').scalar_one())  # noqa: S608
