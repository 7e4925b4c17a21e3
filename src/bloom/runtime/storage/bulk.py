"""Bulk queue filling for `bloom bench --depth`: many queued tasks, inserted by the database itself.

Rows are generated in SQL (PostgreSQL `generate_series`, SQLite a recursive CTE), in chunks, so a
million tasks take seconds, not a million round trips. Each row is a task exactly as the API's
create would store it: every NOT NULL column, status 'queued', queued_at set, the default policy,
a UUIDv7 id (the chunk's millisecond, then random bits) and a context of its own, as distinct
clients' tasks would have. Synchronous: run it in a thread.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Select,
    Text,
    cast,
    create_engine,
    false,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy.pool import NullPool

from bloom.db.database import DatabaseTarget, StorageKind
from bloom.domain.policy import DEFAULT_POLICY
from bloom.runtime.storage.repositories.counts import RECOUNT
from bloom.runtime.storage.repositories.rollups import roll_in
from bloom.runtime.storage.tables import llm_tasks

Progress = Callable[[int, int], None]
"""Called after each chunk with (rows inserted so far, rows to insert)."""

CHUNK_ROWS = 50_000
AGENT_SLUG = "bench"


class QueueTooDeep(ValueError):
    """The queue already holds more queued tasks than the depth asked for."""


@contextmanager
def connect(target: DatabaseTarget) -> Iterator[Connection]:
    """A synchronous connection of its own (NullPool), JSON written with orjson."""
    options: dict[str, Any] = {"poolclass": NullPool, "json_serializer": _json}
    if target.kind is StorageKind.SQLITE:
        options["connect_args"] = {"timeout": 30}  # the server may hold the write lock briefly
    engine = create_engine(target.sync_url, **options)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def count_queued(target: DatabaseTarget) -> int:
    """How many tasks are queued now."""
    with connect(target) as conn:
        stmt = select(func.count()).select_from(llm_tasks).where(llm_tasks.c.status == "queued")
        return int(conn.execute(stmt).scalar_one())


def fill_queue(target: DatabaseTarget, total: int, progress: Progress | None = None) -> int:
    """Insert queued tasks until exactly `total` are queued; returns how many were inserted."""
    queued = count_queued(target)
    if queued > total:
        raise QueueTooDeep(f"{queued} tasks are queued already, more than {total}")
    missing = total - queued
    done = 0
    last_ms = 0
    if progress is not None:
        progress(0, missing)
    with connect(target) as conn:
        while done < missing:
            rows = min(CHUNK_ROWS, missing - done)
            last_ms = max(time.time_ns() // 1_000_000, last_ms + 1)
            with conn.begin(), counted_in_bulk(conn, target.kind):
                conn.execute(_insert_chunk(target.kind, rows, last_ms))
            done += rows
            if progress is not None:
                progress(done, missing)
    return missing


_COUNTING_TRIGGERS = (
    ("llm_tasks", "task_counts_on_insert"),
    ("leases", "task_counts_on_lease_insert"),
)
_ROLLING_TRIGGER = "rollups_on_result_insert"


@contextmanager
def counted_in_bulk(conn: Connection, kind: StorageKind) -> Iterator[None]:
    """Within a transaction: rows inserted in bulk are counted once, after them (`RECOUNT`), with
    PostgreSQL's counting triggers off meanwhile. Each trigger would rewrite the transaction's
    one counter row, and a row rewritten N times in one transaction costs N² (50,000 rows: 23
    s instead of 0.1). Disabling a trigger locks its table until the commit, so the recount is
    exact. SQLite's triggers rewrite the row in place: left on."""
    if kind is not StorageKind.POSTGRESQL:
        yield
        return
    for table, trigger in _COUNTING_TRIGGERS:
        conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}"))
    yield
    for table, trigger in _COUNTING_TRIGGERS:
        conn.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}"))
    for statement in RECOUNT:
        conn.execute(statement)


@contextmanager
def rolled_in_bulk(conn: Connection, kind: StorageKind, tasks: Select[Any]) -> Iterator[None]:
    """Within a transaction: the results of `tasks` inserted in bulk are summed into the rollups
    once, after them (`rollups.roll_in`), with PostgreSQL's rolling trigger off meanwhile (it
    would rewrite the transaction's day and minute rows once per result: N², as counting).
    Disabling it locks llm_results until the commit. SQLite's triggers: left on."""
    if kind is not StorageKind.POSTGRESQL:
        yield
        return
    conn.execute(text(f"ALTER TABLE llm_results DISABLE TRIGGER {_ROLLING_TRIGGER}"))
    yield
    conn.execute(text(f"ALTER TABLE llm_results ENABLE TRIGGER {_ROLLING_TRIGGER}"))
    for statement in roll_in(tasks):
        conn.execute(statement)


def settle(target: DatabaseTarget) -> None:
    """Make the filled table look like one that grew in service, so claims measure the depth
    and not the fill: refresh planner statistics (stale ones pick sequential scans, DESIGN.md
    §6) and, on SQLite, checkpoint the write-ahead log the bulk insert left behind."""
    with connect(target) as conn:
        if target.kind is StorageKind.POSTGRESQL:
            with conn.begin():
                conn.execute(text("ANALYZE llm_tasks"))
            return
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.commit()


def series(kind: StorageKind, rows: int) -> Select[Any]:
    """`rows` rows numbered 1..rows (column `i`), each with `tail`: random hex for the rest of a
    UUIDv7 after its version digit (`random_tail`)."""
    tail = random_tail(kind).label("tail")
    if kind is StorageKind.POSTGRESQL:
        numbers = func.generate_series(1, rows).table_valued("i").render_derived(name="seq")
        return select(numbers.c.i, tail).select_from(numbers)
    seq = select(literal(1, Integer).label("i")).cte("seq", recursive=True)
    seq = seq.union_all(select((seq.c.i + 1).label("i")).where(seq.c.i < rows))
    return select(seq.c.i, tail).select_from(seq)


def random_tail(kind: StorageKind) -> ColumnElement[str]:
    """Random hex for a UUIDv7 after its version digit, new per row: 'xxx-Vxxx-xxxxxxxxxxxx'
    (V the variant)."""
    if kind is StorageKind.POSTGRESQL:
        # gen_random_uuid()::text is 'xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx': keep from char 16 on
        tail: ColumnElement[str] = func.substr(cast(func.gen_random_uuid(), Text), 16)
        return tail
    printed: ColumnElement[str] = func.printf(
        "%03x-%x%03x-%012x",
        func.random().op("&")(0xFFF),
        8 + func.random().op("&")(0x3),
        func.random().op("&")(0xFFF),
        func.random().op("&")(0xFFFFFFFFFFFF),
    )
    return printed


def uuid7(kind: StorageKind, ms: ColumnElement[int], tail: ColumnElement[str]) -> Any:
    """A UUIDv7 made in SQL: 48 bits of the milliseconds `ms`, version 7, then `tail` (random hex
    from `series` or `random_tail`)."""
    high, low = ms // 0x10000, ms % 0x10000
    if kind is StorageKind.POSTGRESQL:
        prefix: Any = (
            func.lpad(func.to_hex(high), 8, "0")
            .concat("-")
            .concat(func.lpad(func.to_hex(low), 4, "0"))
        )
    else:
        prefix = func.printf("%08x-%04x", high, low)
    return prefix.concat("-7").concat(tail)


def _insert_chunk(kind: StorageKind, rows: int, now_ms: int) -> Any:
    # UUIDv7: 48 bits of milliseconds, version 7, then random bits (with the variant bits).
    prefix = f"{now_ms >> 16:08x}-{now_ms & 0xFFFF:04x}-7"
    source = series(kind, rows)
    row = source.subquery("gen")
    values = select(
        literal(prefix, Text).concat(row.c.tail),
        literal(f"bench-depth-{now_ms}-", Text).concat(cast(row.c.i, Text)),
        literal(AGENT_SLUG, Text),
        literal("bench depth task", Text),
        literal([], llm_tasks.c.context_hints.type),
        literal(dict(DEFAULT_POLICY), llm_tasks.c.policy.type),
        literal("text", Text),
        literal("queued", Text),
        literal(now_ms),
        literal(now_ms),
        literal(0),
        literal(3),
        literal(0),
        literal(now_ms),
        false(),
    )
    columns = [
        "id",
        "context_id",
        "agent_slug",
        "prompt",
        "context_hints",
        "policy",
        "desired_format",
        "status",
        "created_at",
        "updated_at",
        "attempts",
        "max_attempts",
        "priority",
        "queued_at",
        "cancel_requested",
    ]
    return insert(llm_tasks).from_select(columns, values)
