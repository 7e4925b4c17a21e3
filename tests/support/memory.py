"""Real claude-mem databases for the memory-sync tests: the plugin's three tables, rows added
at will or by a writer thread that keeps committing (as the plugin's worker does), and one
node's settings on a shared bucket."""

import sqlite3
import threading
from pathlib import Path

from bloom.memory import sqlite as memory_sqlite
from bloom.memory.settings import MemorySettings
from tests.support.s3 import Bucket

SCHEMA = (
    "CREATE TABLE observations (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT, text TEXT)",
    "CREATE TABLE session_summaries (id INTEGER PRIMARY KEY AUTOINCREMENT, summary TEXT)",
    "CREATE TABLE user_prompts (id INTEGER PRIMARY KEY AUTOINCREMENT, prompt TEXT)",
)


def make_db(path: Path, observations: int = 50, tag: str = "a") -> Path:
    """A claude-mem database in WAL mode (as the plugin keeps it) with `observations` rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        for statement in SCHEMA:
            db.execute(statement)
        db.execute("INSERT INTO session_summaries (summary) VALUES ('s')")
        db.execute("INSERT INTO user_prompts (prompt) VALUES ('p')")
    add_observations(path, observations, tag)
    return path


def add_observations(path: Path, count: int, tag: str = "a") -> None:
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO observations (session, text) VALUES (?, ?)",
            [(tag, f"{tag} observation {i} " + "x" * 200) for i in range(count)],
        )


def content_sha(path: Path, tmp: Path) -> str:
    """The digest a push would publish for this database's content."""
    snap = tmp / f"probe-{path.parent.name}.db"
    memory_sqlite.snapshot(path, snap)
    try:
        return memory_sqlite.sha256_of(snap)
    finally:
        snap.unlink()


def count(path: Path, table: str = "observations") -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


class Writer:
    """A thread committing one observation at a time to `path` until stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with sqlite3.connect(self.path, timeout=30) as db:
            while not self._stop.is_set():
                db.execute("INSERT INTO observations (session, text) VALUES ('w', 'live')")
                db.commit()
                self.written += 1

    def __enter__(self) -> "Writer":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def node_settings(
    bucket: Bucket, root: Path, node_id: str, project: str, **overrides: object
) -> MemorySettings:
    """Node `node_id`'s settings: its own data dir under `root`, the shared bucket."""
    values: dict[str, object] = bucket.settings() | {
        "s3_timeout_sec": 5.0,
        "project": project,
        "db_path": root / node_id / "claude-mem.db",
        "node_id": node_id,
    }
    return MemorySettings(**(values | overrides))  # type: ignore[arg-type]
