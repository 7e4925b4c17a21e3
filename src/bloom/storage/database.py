"""The database handle: one engine, dialect quirks, and read/write transactions.

PostgreSQL and SQLite share every query. The differences live here: SQLite gets WAL, a busy
timeout and `BEGIN IMMEDIATE` for writes, and its writers are serialised in-process so they
queue on a lock instead of spinning on SQLITE_BUSY.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from bloom.storage.repositories import Repositories


class StorageKind(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class DatabaseUrlError(ValueError):
    """A database URL we cannot use."""


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    """Where the tables live, as URLs for the async engine and for Alembic's sync one."""

    kind: StorageKind
    async_url: URL
    sync_url: URL

    @property
    def display(self) -> str:
        """The URL without its password, for logs and messages."""
        return self.async_url.render_as_string(hide_password=True)


def resolve_database(
    url: str | None, data_dir: Path, default_name: str = "runtime.db"
) -> DatabaseTarget:
    """Turn a user's database URL (or none: SQLite under `data_dir`) into engine URLs."""
    if not url:
        path = (data_dir / default_name).resolve()
        url = f"sqlite:///{path}"
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except Exception as exc:  # SQLAlchemy raises several types for a malformed URL
        raise DatabaseUrlError(f"Cannot parse database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return DatabaseTarget(
            StorageKind.POSTGRESQL,
            parsed.set(drivername="postgresql+psycopg"),
            parsed.set(drivername="postgresql+psycopg"),
        )
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return DatabaseTarget(
            StorageKind.SQLITE,
            parsed.set(drivername="sqlite+aiosqlite"),
            parsed.set(drivername="sqlite+pysqlite"),
        )
    raise DatabaseUrlError(
        f"Unsupported database URL scheme {parsed.drivername!r}: use postgresql://… or sqlite:///…"
    )


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


class Database:
    """An async engine plus the transaction discipline every service uses."""

    def __init__(
        self, target: DatabaseTarget, *, pool_size: int = 10, sqlite_synchronous: str = "NORMAL"
    ):
        self.target = target
        self.kind = target.kind
        options: dict[str, Any] = {
            "json_serializer": _json_dumps,
            "json_deserializer": orjson.loads,
        }
        if self.kind is StorageKind.POSTGRESQL:
            options |= {"pool_size": pool_size, "max_overflow": pool_size, "pool_pre_ping": False}
        self.engine: AsyncEngine = create_async_engine(target.async_url, **options)
        self._write_lock: asyncio.Lock | None = None
        if self.kind is StorageKind.SQLITE:
            self._write_lock = asyncio.Lock()
            _configure_sqlite(self.engine, sqlite_synchronous)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Repositories]:
        """One read-write transaction: committed when the block ends, rolled back on error."""
        if self._write_lock is None:
            async with self.engine.begin() as conn:
                yield Repositories(conn, self.kind)
            return
        async with self._write_lock, self.engine.connect() as conn:
            conn = await conn.execution_options(sqlite_begin="IMMEDIATE")
            async with conn.begin():
                yield Repositories(conn, self.kind)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Repositories]:
        """A read-only snapshot (one transaction, rolled back at the end)."""
        async with self.engine.connect() as conn:
            yield Repositories(conn, self.kind)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            yield conn

    async def dispose(self) -> None:
        await self.engine.dispose()


def _configure_sqlite(engine: AsyncEngine, synchronous: str) -> None:
    """WAL, a busy timeout and explicit BEGINs (pysqlite's implicit ones cannot be IMMEDIATE)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")
