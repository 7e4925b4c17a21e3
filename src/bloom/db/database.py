"""The database handle: connections, transactions and dialect quirks, for PostgreSQL and SQLite.

Repositories get a `Connection` (the executor's: one driver connection and, for writes, one
transaction) and run SQLAlchemy Core statements on it. PostgreSQL runs on an asyncpg pool with
JSON decoded by the driver. SQLite runs on aiosqlite: one writer connection, its transactions
`BEGIN IMMEDIATE` and serialised in-process (so writers queue on a lock instead of spinning on
SQLITE_BUSY), plus a few reader connections that WAL lets read beside the writer.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

import aiosqlite
import asyncpg
import orjson
from sqlalchemy import Executable, select
from sqlalchemy.engine import URL, make_url

from bloom.db.availability import Availability, DatabaseUnavailable, unreachable
from bloom.db.executor import Connection, Planner, Row

R = TypeVar("R")
RecoveryHook = Callable[[R], Awaitable[object]]
CONNECT_TIMEOUT_SEC = 5.0
PING_TIMEOUT_SEC = 2.0


class StorageKind(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class DatabaseUrlError(ValueError):
    """A database URL we cannot use."""


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    """Where the tables live: a driver URL for the server, a sync one for Alembic and tools."""

    kind: StorageKind
    url: URL
    sync_url: URL

    @property
    def display(self) -> str:
        """The URL without its password, for logs and messages."""
        return self.url.render_as_string(hide_password=True)

    @property
    def dsn(self) -> str:
        """The URL as the driver takes it (PostgreSQL: a libpq URI; SQLite: a file path)."""
        if self.kind is StorageKind.SQLITE:
            return self.url.database or ""
        return self.url.set(drivername="postgresql").render_as_string(hide_password=False)


def resolve_database(
    url: str | None, data_dir: Path, default_name: str = "runtime.db"
) -> DatabaseTarget:
    """Turn a user's database URL (or none: SQLite under `data_dir`) into driver URLs."""
    if not url:
        url = f"sqlite:///{(data_dir / default_name).resolve()}"
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except Exception as exc:  # SQLAlchemy raises several types for a malformed URL
        raise DatabaseUrlError(f"Cannot parse database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return DatabaseTarget(
            StorageKind.POSTGRESQL,
            parsed.set(drivername="postgresql"),
            parsed.set(drivername="postgresql+psycopg"),
        )
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise DatabaseUrlError("SQLite needs a file: sqlite:///path/to/runtime.db")
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return DatabaseTarget(
            StorageKind.SQLITE,
            parsed.set(drivername="sqlite"),
            parsed.set(drivername="sqlite+pysqlite"),
        )
    raise DatabaseUrlError(
        f"Unsupported database URL scheme {parsed.drivername!r}: use postgresql://… or sqlite:///…"
    )


class Database(Generic[R]):
    """The pools, and the transaction discipline every service uses. `repositories` builds the
    schema's repositories around a connection (`write()` and `read()` hand them out).

    An unreachable database raises `DatabaseUnavailable` (`db/availability.py`); after an
    outage, and at start, the `recovery` hooks run in one transaction before any other use."""

    READERS = 4

    def __init__(
        self,
        target: DatabaseTarget,
        repositories: Callable[[Connection], R],
        *,
        pool_size: int = 10,
        sqlite_synchronous: str = "NORMAL",
        committed: Callable[[R], None] | None = None,
        recovery: list[RecoveryHook[R]] | None = None,
    ):
        self.target = target
        self._repositories = repositories
        self._committed = committed
        self.recovery: list[RecoveryHook[R]] = recovery or []
        self.availability = Availability()
        self.kind = target.kind
        self.planner = Planner(target.kind)
        self._pool_size = pool_size
        self._sqlite_synchronous = sqlite_synchronous
        self._opening = asyncio.Lock()
        self._pool: asyncpg.Pool | None = None
        self._writer: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._readers: asyncio.Queue[aiosqlite.Connection] | None = None

    async def _open(self) -> None:
        async with self._opening:
            if self._pool is not None or self._writer is not None:
                return
            if self.kind is StorageKind.POSTGRESQL:
                self._pool = await asyncpg.create_pool(
                    self.target.dsn,
                    min_size=0,  # no floor to restore: asyncpg logs a traceback per try
                    max_size=self._pool_size,
                    init=_init_postgresql,
                    reset=_skip_reset,
                    statement_cache_size=512,
                    timeout=CONNECT_TIMEOUT_SEC,
                )
                return
            readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
            for _ in range(self.READERS):
                readers.put_nowait(await self._connect_sqlite())
            self._writer = await self._connect_sqlite()
            self._readers = readers

    async def _connect_sqlite(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.target.dsn, isolation_level=None)
        for pragma in (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA synchronous={self._sqlite_synchronous}",
            "PRAGMA busy_timeout=10000",
            "PRAGMA foreign_keys=ON",
        ):
            await conn.execute(pragma)
        return conn

    @contextlib.asynccontextmanager
    async def connection(self, *, write: bool) -> AsyncIterator[Connection]:
        """A connection for one unit of work; with `write`, inside one transaction that commits
        when the block ends and rolls back if it raises."""
        if not self.availability.recovered:
            await self._recover()
        async with self._unit(write=write) as connection:
            yield connection

    async def _recover(self) -> None:
        """Run the recovery hooks, once, before the database is used again."""
        async with self.availability.recovering:
            if self.availability.recovered:
                return
            if self.recovery:
                async with self._unit(write=True) as connection:
                    repositories = self._repositories(connection)
                    for hook in self.recovery:
                        await hook(repositories)
            self.availability.back()

    @contextlib.asynccontextmanager
    async def _unit(self, *, write: bool) -> AsyncIterator[Connection]:
        """`connection` without the recovery check; errors that say the database cannot be
        reached become `DatabaseUnavailable`."""
        in_body = False
        try:
            async with self._connected(write=write) as connection:
                in_body = True
                yield connection
                in_body = False
        except Exception as exc:
            if unreachable(exc, connecting=not in_body):
                raise self.availability.lost(exc) from None
            raise

    @contextlib.asynccontextmanager
    async def _connected(self, *, write: bool) -> AsyncIterator[Connection]:
        if self._pool is None and self._writer is None:
            await self._open()
        if self._pool is not None:
            async with self._pool.acquire() as conn:
                if write:
                    async with conn.transaction():
                        connection = Connection(conn, self.planner)
                        yield connection
                        await connection.flush()
                else:
                    yield Connection(conn, self.planner)
            return
        if write:
            assert self._writer is not None
            async with self._write_lock:
                await self._writer.execute("BEGIN IMMEDIATE")
                try:
                    connection = Connection(self._writer, self.planner)
                    yield connection
                    await connection.flush()
                except BaseException:
                    await self._writer.execute("ROLLBACK")
                    raise
                await self._writer.execute("COMMIT")
            return
        assert self._readers is not None
        reader = await self._readers.get()
        try:
            yield Connection(reader, self.planner)
        finally:
            self._readers.put_nowait(reader)

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[R]:
        """Every repository, in one read-write transaction; once it has committed, the
        `committed` hook sees them (to log what changed, say)."""
        async with self.connection(write=True) as connection:
            repositories = self._repositories(connection)
            yield repositories
        if self._committed is not None:
            self._committed(repositories)

    @contextlib.asynccontextmanager
    async def single(self) -> AsyncIterator[R]:
        """Every repository, for a unit of work that writes in one statement. On PostgreSQL no
        transaction is opened: the statement commits alone, atomically and as durably as any
        commit, and the BEGIN and COMMIT round trips are saved. SQLite: `write()`. Rows may
        not be appended (they would commit apart). The `committed` hook then sees them."""
        if self.kind is not StorageKind.POSTGRESQL:
            async with self.write() as repositories:
                yield repositories
            return
        async with self.connection(write=False) as connection:
            repositories = self._repositories(connection)
            yield repositories
            if connection.pending:
                raise RuntimeError("rows appended outside a transaction")
        if self._committed is not None:
            self._committed(repositories)

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[R]:
        """Every repository, for reads; each statement sees the latest committed state."""
        async with self.connection(write=False) as connection:
            yield self._repositories(connection)

    async def execute(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        """One statement in its own transaction."""
        async with self.connection(write=True) as connection:
            return await connection.execute(statement, params)

    async def reachable(self, timeout_sec: float = PING_TIMEOUT_SEC) -> bool:
        """Whether one trivial statement runs within `timeout_sec` (for health checks)."""
        try:
            async with asyncio.timeout(timeout_sec), self.connection(write=False) as connection:
                await connection.execute(select(1))
        except (DatabaseUnavailable, TimeoutError):
            return False
        return True

    async def dispose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        while self._readers is not None and not self._readers.empty():
            await self._readers.get_nowait().close()
        self._readers = None


async def _init_postgresql(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, schema="pg_catalog", encoder=_json_text, decoder=orjson.loads, format="text"
        )


async def _skip_reset(conn: asyncpg.Connection) -> None:
    """Skip asyncpg's reset on release (a round trip of UNLISTEN, RESET ALL and more per
    transaction): our connections leave no server-side state behind. Advisory locks are
    transaction-scoped, and LISTEN has a connection of its own."""


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()
