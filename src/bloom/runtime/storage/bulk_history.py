"""Bulk history for `bloom bench --dashboard`: tasks as a runtime that served them for a while
holds them, with their leases, results and audit entries, and a day of queue depth samples;
inserted by the database itself (see `bulk`), in chunks. Synchronous: run it in a thread.

Task number g (1..N) is created at `start + g·step`, spread evenly over `span_ms` ending a few
minutes before now. Its status comes from g % 100: 70 % completed, 8 % failed, 2 % dead, 3 %
cancelled, 12 % queued, 2 % leased, 3 % running. Every task that got as far as a worker has one
lease (active for a task in flight, else released); every completed, failed or dead task one
result (success, else error), 5 to 60 s after its creation; every task a `task_created` audit entry,
plus `task_leased` and its ending's entry where it has them. Workers are `dash-w0`…`dash-w15`,
contexts `dash-ctx-0`…`dash-ctx-4999`, agents `dash-agent-0`…`dash-agent-4`; a prompt reads
"Summarise ticket <g> about topic <g % 1000>.".
"""

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Subquery,
    Text,
    case,
    cast,
    false,
    func,
    insert,
    literal,
    null,
    select,
    text,
)

from bloom.db.database import DatabaseTarget, StorageKind
from bloom.domain.history import MINUTE_MS
from bloom.domain.policy import DEFAULT_POLICY
from bloom.runtime.storage.bulk import (
    CHUNK_ROWS,
    Progress,
    connect,
    counted_in_bulk,
    random_tail,
    rolled_in_bulk,
    series,
    uuid7,
)
from bloom.runtime.storage.tables import audit_logs, leases, llm_results, llm_tasks, queue_samples

AGENT_PREFIX = "dash-agent-"
WORKERS = 16
CONTEXTS = 5_000
AGENTS = 5
DEFAULT_SPAN_MS = 2 * 86_400_000
SAMPLE_MINUTES = 24 * 60
_QUIET_MS = 5 * MINUTE_MS
"""The newest task is this much older than the fill: its result lies in the past too."""
_LEASED_AFTER_MS = 10
_STATUS_BY_PERCENT = (  # (below this g % 100, the status)
    (70, "completed"),
    (78, "failed"),
    (80, "dead"),
    (83, "cancelled"),
    (95, "queued"),
    (97, "leased"),
)
_IN_FLIGHT = ("leased", "running")
_ENDED = ("completed", "failed", "dead")
t = llm_tasks


def count_tasks(target: DatabaseTarget) -> int:
    with connect(target) as conn:
        return int(conn.execute(select(func.count()).select_from(t)).scalar_one())


def position_at(target: DatabaseTarget, rank: int) -> tuple[int, str]:
    """(created_at, id) of the task `rank` places from the newest: a deep page's cursor."""
    stmt = (
        select(t.c.created_at, t.c.id)
        .order_by(t.c.created_at.desc(), t.c.id.desc())
        .offset(max(rank, 0))
        .limit(1)
    )
    with connect(target) as conn:
        row = conn.execute(stmt).one()
        return int(row.created_at), str(row.id)


def fill_history(
    target: DatabaseTarget,
    total: int,
    *,
    now_ms: int,
    span_ms: int = DEFAULT_SPAN_MS,
    progress: Progress | None = None,
) -> int:
    """Insert tasks (and their records) until the database holds `total` tasks; returns how
    many were inserted. The samples of the day before `now_ms` are added where missing."""
    existing = count_tasks(target)
    missing = max(total - existing, 0)
    step = max(span_ms // max(total, 1), 1)
    start = now_ms - _QUIET_MS - total * step
    done = 0
    if progress is not None:
        progress(0, missing)
    with connect(target) as conn:
        while done < missing:
            rows = min(CHUNK_ROWS, missing - done)
            first = existing + done + 1
            with conn.begin(), counted_in_bulk(conn, target.kind):
                _insert_chunk(conn, target.kind, first, rows, start=start, step=step, now=now_ms)
            done += rows
            if progress is not None:
                progress(done, missing)
        with conn.begin():
            conn.execute(_samples(target.kind, now_ms))
    return missing


def settle(target: DatabaseTarget) -> None:
    """Make the filled tables look like ones that grew in service: planner statistics, and on
    PostgreSQL the visibility map autovacuum keeps (index-only scans count with it)."""
    with connect(target) as conn:
        if target.kind is StorageKind.POSTGRESQL:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text("VACUUM ANALYZE"))
            return
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.commit()


def _insert_chunk(
    conn: Connection, kind: StorageKind, first: int, rows: int, *, start: int, step: int, now: int
) -> None:
    conn.execute(_tasks(kind, first, rows, start=start, step=step))
    low, high = start + first * step, start + (first + rows - 1) * step
    chunk = (
        select(t)
        .where(t.c.created_at.between(low, high), t.c.agent_slug.startswith(AGENT_PREFIX))
        .subquery("chunk")
    )
    conn.execute(_leases(chunk, now))
    with rolled_in_bulk(conn, kind, select(chunk.c.id)):
        conn.execute(_results(kind, chunk))
    for statement in _audit(kind, chunk):
        conn.execute(statement)


def _tasks(kind: StorageKind, first: int, rows: int, *, start: int, step: int) -> Any:
    numbered = series(kind, rows).subquery("seq")
    g = cast(numbered.c.i, BigInteger) + (first - 1)
    percent = g % 100
    status = case(*((percent < bound, name) for bound, name in _STATUS_BY_PERCENT), else_="running")
    created = literal(start, BigInteger) + g * literal(step, BigInteger)
    gen = select(
        g.label("g"), status.label("status"), created.label("created_at"), numbered.c.tail
    ).subquery("gen")
    attempted = gen.c.status.not_in(["queued", "cancelled"])
    ended_at = gen.c.created_at + 5_000 + gen.c.created_at % 55_000
    lease_tail = random_tail(kind)
    values = select(
        uuid7(kind, gen.c.created_at, gen.c.tail),
        _text("dash-ctx-", gen.c.g % CONTEXTS),
        _text(AGENT_PREFIX, gen.c.g % AGENTS),
        literal("Summarise ticket ", Text)
        .concat(cast(gen.c.g, Text))
        .concat(" about topic ")
        .concat(cast(gen.c.g % 1000, Text))
        .concat("."),
        literal([], t.c.context_hints.type),
        literal(dict(DEFAULT_POLICY), t.c.policy.type),
        literal("text", Text),
        gen.c.status,
        gen.c.created_at,
        case((gen.c.status.in_(_ENDED), ended_at), else_=gen.c.created_at),
        case((attempted, uuid7(kind, gen.c.created_at + _LEASED_AFTER_MS, lease_tail))),
        case((attempted, _text("dash-w", gen.c.g % WORKERS))),
        case((attempted, 1), else_=0),
        literal(3),
        literal(0),
        gen.c.created_at,
        false(),
        case((gen.c.status.in_(("failed", "dead")), "bench failure")),
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
        "lease_id",
        "worker_id",
        "attempts",
        "max_attempts",
        "priority",
        "queued_at",
        "cancel_requested",
        "last_error",
    ]
    return insert(t).from_select(columns, values)


def _text(prefix: str, number: ColumnElement[int]) -> ColumnElement[str]:
    result: ColumnElement[str] = literal(prefix, Text).concat(cast(number, Text))
    return result


def _leases(chunk: Subquery, now: int) -> Any:
    in_flight = chunk.c.status.in_(_IN_FLIGHT)
    started = chunk.c.created_at + _LEASED_AFTER_MS
    values = select(
        chunk.c.lease_id,
        chunk.c.id,
        chunk.c.worker_id,
        started,
        case((in_flight, literal(now + 600_000, BigInteger)), else_=started + 600_000),
        literal(600),
        case((in_flight, "active"), else_="released"),
        case((in_flight, literal(now, BigInteger)), else_=chunk.c.updated_at),
        chunk.c.context_id,
        started,
        case((in_flight, null()), else_=chunk.c.updated_at),
    ).where(chunk.c.lease_id.is_not(None))
    columns = [
        "id",
        "task_id",
        "worker_id",
        "started_at",
        "expires_at",
        "ttl_seconds",
        "status",
        "last_heartbeat",
        "context_id",
        "claimed_at",
        "ended_at",
    ]
    return insert(leases).from_select(columns, values)


def _results(kind: StorageKind, chunk: Subquery) -> Any:
    succeeded = chunk.c.status == "completed"
    values = select(
        uuid7(kind, chunk.c.updated_at, random_tail(kind)),
        chunk.c.id,
        chunk.c.worker_id,
        case((succeeded, "success"), else_="error"),
        case((succeeded, "Done.")),
        case((succeeded, null()), else_="bench failure"),
        literal({}, llm_results.c.metrics.type),
        chunk.c.updated_at,
        chunk.c.lease_id,
        case((succeeded, null()), else_="model_error"),
    ).where(chunk.c.status.in_(_ENDED))
    columns = [
        "id",
        "task_id",
        "worker_id",
        "status",
        "output",
        "error_message",
        "metrics",
        "completed_at",
        "lease_id",
        "error_code",
    ]
    return insert(llm_results).from_select(columns, values)


def _audit(kind: StorageKind, chunk: Subquery) -> list[Any]:
    columns = [
        "id",
        "timestamp",
        "action",
        "entity_type",
        "entity_id",
        "actor",
        "detail",
        "task_id",
    ]
    created = select(
        uuid7(kind, chunk.c.created_at, random_tail(kind)),
        chunk.c.created_at,
        literal("task_created", Text),
        literal("llm_task", Text),
        chunk.c.id,
        literal("api", Text),
        literal("Task for agent ", Text).concat(chunk.c.agent_slug),
        chunk.c.id,
    )
    started = chunk.c.created_at + _LEASED_AFTER_MS
    leased = select(
        uuid7(kind, started, random_tail(kind)),
        started,
        literal("task_leased", Text),
        literal("lease", Text),
        chunk.c.lease_id,
        literal("router", Text),
        literal("Task leased to worker ", Text).concat(chunk.c.worker_id),
        chunk.c.id,
    ).where(chunk.c.lease_id.is_not(None))
    ended = select(
        uuid7(kind, chunk.c.updated_at, random_tail(kind)),
        chunk.c.updated_at,
        literal("task_", Text).concat(chunk.c.status),
        literal("llm_task", Text),
        chunk.c.id,
        case((chunk.c.status == "cancelled", "admin"), else_=chunk.c.worker_id),
        literal("Task ", Text).concat(chunk.c.status),
        chunk.c.id,
    ).where(chunk.c.status.in_((*_ENDED, "cancelled")))
    return [insert(audit_logs).from_select(columns, rows) for rows in (created, leased, ended)]


def _samples(kind: StorageKind, now: int) -> Any:
    """A queue depth sample for each minute of the day before `now`, where none is stored."""
    minutes = series(kind, SAMPLE_MINUTES).subquery("minutes")
    last = now - now % MINUTE_MS
    at = literal(last, BigInteger) - (minutes.c.i - 1) * MINUTE_MS
    values = select(
        at,
        cast(1_000 + minutes.c.i % 200, Integer),
        cast(20 + minutes.c.i % 16, Integer),
    ).where(at.not_in(select(queue_samples.c.at)))
    return insert(queue_samples).from_select(["at", "queued", "running"], values)
