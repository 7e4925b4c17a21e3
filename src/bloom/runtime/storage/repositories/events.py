"""SQL for `task_events`: a task's live output, appended in batches, read in order, pruned when
old; and `task_event_totals`, what each task stored and dropped, and when its newest arrived.

A batch is one INSERT … SELECT over the batch as a JSON array (PostgreSQL's
`jsonb_array_elements … WITH ORDINALITY`, SQLite's `json_each`), so 500 events cost one round
trip. Each element carries its `data` already serialised, as a JSON string: both databases then
store exactly that text (SQLite's `json_extract` would turn a bare JSON string into plain text).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Insert,
    Integer,
    String,
    Text,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB

from bloom.db.columns import JSONType
from bloom.db.repository import Repository, entity_columns
from bloom.domain.models import TaskEvent
from bloom.domain.states import TERMINAL
from bloom.runtime.storage.tables import llm_tasks, task_event_totals, task_events

EVENT_COLUMNS = entity_columns(task_events, TaskEvent)
ev, tot, t = task_events, task_event_totals, llm_tasks

_AFTER = (
    select(*EVENT_COLUMNS)
    .where(ev.c.task_id == bindparam("b_task"), ev.c.seq > bindparam("b_after"))
    .order_by(ev.c.seq)
    .limit(bindparam("b_limit"))
)
_LAST_SEQ = select(func.max(ev.c.seq)).where(ev.c.task_id == bindparam("b_task"))


def _total(name: str) -> Any:
    return select(tot.c[name]).where(tot.c.task_id == bindparam("b_task")).scalar_subquery()


_TALLY = select(
    func.coalesce(_LAST_SEQ.scalar_subquery(), 0).label("last_seq"),
    func.coalesce(_total("bytes"), 0).label("bytes"),
    _total("marker_seq").label("marker_seq"),
)
_ADDED = ("bytes", "dropped_events", "dropped_bytes")


def _counts() -> dict[str, Any]:
    """Per dialect: the task's totals row made, or added to."""
    counts = {}
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
        row = dialect.insert(tot)
        added = {name: tot.c[name] + row.excluded[name] for name in _ADDED}
        counts[kind] = row.on_conflict_do_update(
            index_elements=[tot.c.task_id],
            set_=added
            | {
                "marker_seq": func.coalesce(tot.c.marker_seq, row.excluded.marker_seq),
                "last_at": row.excluded.last_at,
            },
        ).returning(tot.c.dropped_events, tot.c.dropped_bytes)
    return counts


_COUNT = _counts()
_REWRITE = update(ev).where(ev.c.task_id == bindparam("b_task"), ev.c.seq == bindparam("b_seq"))
# Old events of tasks that have ended (a task in flight, or queued again, keeps all of its own).
# Rows another replica is deleting are passed over (PostgreSQL): no waits, no deadlocks.
_OLD = (
    select(ev.c.task_id, ev.c.seq)
    .join(t, t.c.id == ev.c.task_id)
    .where(
        ev.c.created_at < bindparam("b_before"),
        t.c.status.in_([literal_column(f"'{status}'") for status in sorted(TERMINAL)]),
    )
    .limit(bindparam("b_limit"))
    .with_for_update(of=ev, skip_locked=True)
)
_PRUNE = delete(ev).where(tuple_(ev.c.task_id, ev.c.seq).in_(_OLD)).returning(ev.c.seq)


@dataclass(frozen=True, slots=True)
class Tally:
    """Where a task's events stand: the last seq, the bytes stored, the marker's seq if any."""

    last_seq: int
    bytes: int
    marker_seq: int | None


@dataclass(frozen=True, slots=True)
class Dropped:
    """What a task has dropped in all (events and their bytes)."""

    events: int
    bytes: int


def _append_statement(kind: str) -> Insert:
    """INSERT the elements of `b_events` ([{"type": …, "data": "<json text>"}, …]) with seqs
    `b_last` + 1, `b_last` + 2, … in array order."""
    batch = bindparam("b_events", type_=JSONType)
    position: ColumnElement[Any]
    event_type: ColumnElement[Any]
    data: ColumnElement[Any]
    if kind == "postgresql":
        rows = (
            func.jsonb_array_elements(batch)
            .table_valued(column("value", JSONB), with_ordinality="ord")
            .render_derived()
        )
        position = rows.c.ord  # 1-based
        event_type = rows.c.value.op("->>")(literal_column("'type'"))
        data = cast(rows.c.value.op("->>")(literal_column("'data'")), JSONB)
    else:
        rows = func.json_each(batch).table_valued("value", "key")
        position = rows.c.key + literal_column("1")  # 0-based
        event_type = func.json_extract(rows.c.value, literal_column("'$.type'"))
        data = func.json_extract(rows.c.value, literal_column("'$.data'"))
    source = select(
        bindparam("b_task", type_=String()),
        bindparam("b_last", type_=Integer()) + position,
        bindparam("b_lease", type_=String()),
        bindparam("b_worker", type_=String()),
        cast(event_type, Text()),
        data,
        bindparam("b_now", type_=BigInteger()),
    ).select_from(rows)
    names = ["task_id", "seq", "lease_id", "worker_id", "type", "data", "created_at"]
    return insert(ev).from_select(names, source)


_APPEND = {kind: _append_statement(kind) for kind in ("postgresql", "sqlite")}


class EventRepository(Repository):
    async def tally(self, task_id: str) -> Tally:
        """The task's last seq (0 before its first event), the bytes it stored, its marker."""
        (row,) = await self.run(_TALLY, {"b_task": task_id})
        return Tally(int(row["last_seq"]), int(row["bytes"]), row["marker_seq"])

    async def count(
        self, task_id: str, *, stored: int, dropped: Dropped, marker_seq: int | None, now: int
    ) -> Dropped:
        """Add `stored` bytes and `dropped` to the task's totals (and its marker's seq, when it
        has none yet), its newest output arriving `now`; what it has dropped in all."""
        values = {
            "task_id": task_id,
            "bytes": stored,
            "dropped_events": dropped.events,
            "dropped_bytes": dropped.bytes,
            "marker_seq": marker_seq,
            "last_at": now,
        }
        (row,) = await self.run(_COUNT[self.kind], values)
        return Dropped(int(row["dropped_events"]), int(row["dropped_bytes"]))

    async def rewrite(self, task_id: str, seq: int, data: Any) -> None:
        """Replace the data of the task's event `seq`."""
        await self.run(_REWRITE, {"b_task": task_id, "b_seq": seq, "data": data})

    async def prune(self, before: int, limit: int) -> int:
        """Delete at most `limit` events created before `before` of tasks that have ended; how
        many there were."""
        return len(await self.run(_PRUNE, {"b_before": before, "b_limit": limit}))

    async def append(
        self,
        task_id: str,
        *,
        last_seq: int,
        lease_id: str,
        worker_id: str,
        events: Sequence[tuple[str, str]],
        now: int,
    ) -> None:
        """Insert `events` ((type, data as JSON text) pairs) as seqs `last_seq` + 1, + 2, …

        The caller serialises appends to one task (it holds the task's row lock), so the
        `last_seq` it read is still the last."""
        params = {
            "b_task": task_id,
            "b_last": last_seq,
            "b_lease": lease_id,
            "b_worker": worker_id,
            "b_events": [{"type": kind, "data": data} for kind, data in events],
            "b_now": now,
        }
        await self.run(_APPEND[self.kind], params)

    async def after(self, task_id: str, seq: int, limit: int) -> list[TaskEvent]:
        """The task's events with a seq above `seq`, in order, at most `limit` of them."""
        params = {"b_task": task_id, "b_after": seq, "b_limit": limit}
        return await self.all(TaskEvent, _AFTER, params)
