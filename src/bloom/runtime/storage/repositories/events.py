"""SQL for `task_events`: a task's live output, appended in batches, read in order.

A batch is one INSERT … SELECT over the batch as a JSON array (PostgreSQL's
`jsonb_array_elements … WITH ORDINALITY`, SQLite's `json_each`), so 500 events cost one round
trip. Each element carries its `data` already serialised, as a JSON string: both databases then
store exactly that text (SQLite's `json_extract` would turn a bare JSON string into plain text).
"""

from collections.abc import Sequence
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
    func,
    insert,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB

from bloom.db.columns import JSONType
from bloom.db.repository import Repository, entity_columns
from bloom.domain.models import TaskEvent
from bloom.runtime.storage.tables import task_events

EVENT_COLUMNS = entity_columns(task_events, TaskEvent)
ev = task_events

_AFTER = (
    select(*EVENT_COLUMNS)
    .where(ev.c.task_id == bindparam("b_task"), ev.c.seq > bindparam("b_after"))
    .order_by(ev.c.seq)
    .limit(bindparam("b_limit"))
)
_LAST_SEQ = select(func.max(ev.c.seq)).where(ev.c.task_id == bindparam("b_task"))


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
    async def last_seq(self, task_id: str) -> int:
        """The task's highest seq, 0 before its first event."""
        value = await self.scalar(_LAST_SEQ, {"b_task": task_id})
        return int(value or 0)

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
