"""The CPU time of the PostgreSQL backends that serve one database, when PostgreSQL runs on this
machine: who they are from `pg_stat_activity`, their time from /proc."""

from pathlib import Path

import asyncpg

from bloom.bench.server import PROC, on_linux, process_cpu_sec
from bloom.db.database import DatabaseTarget, StorageKind

_BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""
CONNECT_TIMEOUT_SEC = 5.0


class Backends:
    """A connection of the bench's own to the database, to ask who serves it (its own backend
    left out)."""

    def __init__(self, conn: asyncpg.Connection):
        self.conn = conn

    @classmethod
    async def open(cls, target: DatabaseTarget) -> "Backends | None":
        """None when the database is not PostgreSQL, cannot be reached, or its backends are not
        processes of this machine (a server elsewhere, or in a container of its own)."""
        if target.kind is not StorageKind.POSTGRESQL or not on_linux():
            return None
        try:
            conn = await asyncpg.connect(target.dsn, timeout=CONNECT_TIMEOUT_SEC)
        except (OSError, TimeoutError, asyncpg.PostgresError):
            return None
        backends = cls(conn)
        try:
            own = await conn.fetchval("SELECT pg_backend_pid()")
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            own = None
        if own is None or not _is_postgres(PROC / str(own)):
            await backends.close()
            return None
        return backends

    async def cpu_sec(self) -> dict[int, float] | None:
        """Each backend's CPU time so far, by process id (those gone meanwhile left out); None
        when the database could not be asked."""
        try:
            rows = await self.conn.fetch(_BACKENDS)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return None
        times = {row["pid"]: process_cpu_sec(row["pid"]) for row in rows}
        return {pid: sec for pid, sec in times.items() if sec is not None}

    async def close(self) -> None:
        await self.conn.close()


def _is_postgres(process: Path) -> bool:
    try:
        return (process / "comm").read_text().strip() in ("postgres", "postmaster")
    except OSError:
        return False
