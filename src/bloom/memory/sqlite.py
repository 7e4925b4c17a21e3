"""The local claude-mem database: snapshots and restores through SQLite's online backup API, so
neither needs the plugin's worker stopped, and a snapshot's digest depends on content only.

A snapshot is a backup (one step: a consistent image while others write), made a single file
(`journal_mode=DELETE`), compacted (`VACUUM`, as the reference's `VACUUM INTO`), checked
(`integrity_check`, the three memory tables) and given fixed header counters, so two snapshots
of the same content are the same bytes: the same SHA-256 on every node.

A restore copies a verified snapshot into the live database with the backup API too: one write
transaction (all or nothing; SQLite's journal undoes a crash midway), safe under WAL and under
other connections, which see the new content at their next read.
"""

import contextlib
import hashlib
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

from bloom.domain.memory import MEMORY_TABLES, Counts

CHUNK = 1024 * 1024
BUSY_TIMEOUT_SEC = 30.0
_COUNTER_OFFSETS = (24, 92)
"""The header's file change counter and its version-valid-for copy: per-file history, not
content; set to 1 in every snapshot."""


class MemoryDbError(Exception):
    """The local database cannot be read, is damaged, or is not a claude-mem database."""


@contextlib.contextmanager
def _connect(path: Path, *, read_only: bool = False) -> Iterator[sqlite3.Connection]:
    uri = f"file:{path}?mode=ro" if read_only else f"file:{path}"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SEC)
    except sqlite3.Error as exc:
        raise MemoryDbError(f"{path}: {exc}") from None
    try:
        yield connection
    except sqlite3.Error as exc:
        raise MemoryDbError(f"{path}: {exc}") from None
    finally:
        connection.close()


def snapshot(db: Path, target: Path) -> Counts:
    """Write a checked, content-only snapshot of `db` to `target`; its counts."""
    target.unlink(missing_ok=True)
    with _connect(db, read_only=True) as source, _connect(target) as copy:
        source.backup(copy)  # pages=-1: one step, under one read transaction
    with _connect(target) as copy:
        copy.execute("PRAGMA journal_mode=DELETE")
        copy.execute("VACUUM")
    with target.open("r+b") as file:
        for offset in _COUNTER_OFFSETS:
            file.seek(offset)
            file.write(struct.pack(">I", 1))
    return check(target)


def check(path: Path) -> Counts:
    """`PRAGMA integrity_check` must say ok and the memory tables must exist; their counts."""
    with _connect(path, read_only=True) as connection:
        verdict = connection.execute("PRAGMA integrity_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise MemoryDbError(f"{path}: integrity check failed: {verdict[0] if verdict else ''}")
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        missing = [name for name in MEMORY_TABLES if name not in tables]
        if missing:
            raise MemoryDbError(f"{path}: not a claude-mem database (no {', '.join(missing)})")
        counted = [f'SELECT count(*) FROM "{name}"' for name in MEMORY_TABLES]  # noqa: S608
        rows = [int(connection.execute(query).fetchone()[0]) for query in counted]
    return Counts(rows[0], rows[1], rows[2], tables=len(tables))


def observations(db: Path) -> int:
    """The local observation count (read only), for the local-ahead check."""
    with _connect(db, read_only=True) as connection:
        return int(connection.execute("SELECT count(*) FROM observations").fetchone()[0])


def restore(snapshot_path: Path, db: Path) -> None:
    """Replace the content of `db` (existing) by the snapshot's, in one transaction."""
    with _connect(snapshot_path, read_only=True) as source, _connect(db) as live:
        source.backup(live)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
