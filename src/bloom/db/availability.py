"""Whether the database can be reached: which errors mean it cannot, one log line when an outage
starts and one when it ends, and what must run before anyone uses the database again.

A lost or refused connection is not a bug of ours, so it is not a traceback per request: callers
get `DatabaseUnavailable` (a 503 with `Retry-After`), and the log says `database_unreachable`
once and `database_recovered` once, with the outage's length. The recovery hooks (the runtime's:
give every active lease a new TTL, since no worker could heartbeat while we could not listen)
run once after an outage, and once at start, before any other use of the database.
"""

import asyncio
import sqlite3
import time

import asyncpg
import structlog

from bloom.domain.errors import Unavailable

log = structlog.get_logger(__name__)

RETRY_AFTER_SEC = 2
UNREACHABLE_MESSAGE = "Database unavailable, retry shortly"
SQLITE_UNREACHABLE = ("disk i/o error", "unable to open database", "database disk image")


class DatabaseUnavailable(Unavailable):
    """The database cannot be reached right now (503, `Retry-After`)."""

    def __init__(self, reason: str = ""):
        super().__init__(UNREACHABLE_MESSAGE, retry_after_sec=RETRY_AFTER_SEC)
        self.reason = reason


def unreachable(exc: BaseException, *, connecting: bool = False) -> bool:
    """Whether `exc` says the database cannot be reached (rather than that a statement is
    wrong): a lost connection, a server shutting down or starting; while `connecting`, also a
    refused connection or a timeout (raised elsewhere, those may not be the database's)."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError  # SQLSTATE class 08
        | asyncpg.InterfaceError  # "connection is closed", released mid-operation
        | asyncpg.CannotConnectNowError  # 57P03: starting up or shutting down
        | asyncpg.AdminShutdownError  # 57P01: pg_ctl stop
        | asyncpg.CrashShutdownError  # 57P02
        | asyncpg.TooManyConnectionsError,
    ):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return any(text in str(exc).lower() for text in SQLITE_UNREACHABLE)
    return connecting and isinstance(exc, OSError | TimeoutError)


class Availability:
    """The database's state as this process last saw it: reachable or not, and whether the
    recovery hooks have run since the last outage. It starts as not yet recovered, so that the
    hooks run before the first use."""

    def __init__(self) -> None:
        self.recovered = False
        self.recovering = asyncio.Lock()
        self._down_since: float | None = None  # monotonic; None while reachable

    @property
    def reachable(self) -> bool:
        return self._down_since is None

    def lost(self, exc: BaseException) -> DatabaseUnavailable:
        """Record that the database could not be reached; the error to raise instead."""
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("database_unreachable", error=f"{type(exc).__name__}: {exc}"[:300])
        self.recovered = False
        return exc if isinstance(exc, DatabaseUnavailable) else DatabaseUnavailable(str(exc))

    def back(self) -> None:
        """The recovery hooks have run: the database is in use again."""
        if self._down_since is not None:
            outage = time.monotonic() - self._down_since
            log.info("database_recovered", outage_sec=round(outage, 3))
        self._down_since = None
        self.recovered = True
