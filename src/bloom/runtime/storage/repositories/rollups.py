"""SQL for the results' rollups (`usage_days`, `result_minutes`, `result_quarters`) as migration
0019's triggers keep them, summed over their slots: a day's usage per project or agent CLI, and
the results per bucket of whole minutes (of whole quarters of an hour: from those), reads of a
few rows however many results they sum.

`roll_in`: results inserted in bulk with PostgreSQL's rolling trigger off, summed in after them."""

import functools
from dataclasses import asdict
from typing import Any

from sqlalchemy import (
    BigInteger,
    Select,
    bindparam,
    case,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects import postgresql

from bloom.db.repository import Repository, is_state
from bloom.domain.history import MINUTE_MS
from bloom.domain.usage import DAY_MS, DayRow, DaySums, UsageGroup
from bloom.runtime.storage.tables import (
    USAGE_DAY_SUMS,
    llm_results,
    llm_tasks,
    result_minutes,
    result_quarters,
    usage_days,
)

ud, res, tsk = usage_days, llm_results, llm_tasks
SLOTS = 32
"""PostgreSQL's slots (migration 0019's triggers roll into `txid_current() % 32`)."""

_DAY_SUMS = tuple(func.coalesce(func.sum(ud.c[name]), 0).label(name) for name in USAGE_DAY_SUMS)
_DAY = ud.c.day == bindparam("b_day", type_=BigInteger())
_DAY_TOTAL = select(*_DAY_SUMS).where(_DAY)
_DAY_KEYS = {
    UsageGroup.PROJECT: ud.c.project,
    UsageGroup.AGENT: ud.c.project,
    UsageGroup.CLI: ud.c.cli,
}


@functools.cache
def _day_statement(group: UsageGroup) -> Any:
    """A day's sums per group, the costliest first, up to a limit; groups whose results were
    all deleted (their rows sum to no attempt) left out."""
    key = _DAY_KEYS[group]
    return (
        select(key.label("key"), *_DAY_SUMS)
        .where(_DAY)
        .group_by(key)
        .having(func.sum(ud.c.attempts) > 0)
        .order_by(literal_column("cost_usd").desc(), literal_column("attempts").desc(), key)
        .limit(bindparam("b_limit"))
    )


QUARTER_MS = 15 * MINUTE_MS
_COUNTED = {QUARTER_MS: result_quarters, MINUTE_MS: result_minutes}
"""The results counted per span, longest first: a bucket reads the longest it is made of."""


@functools.cache
def _throughput_statement(span_ms: int) -> Any:
    counted = _COUNTED[span_ms]
    first = bindparam("b_first", type_=BigInteger())
    bucket = (counted.c.start - first) // bindparam("b_bucket_ms", type_=BigInteger())
    return (
        select(
            bucket.label("bucket"),
            func.sum(counted.c.succeeded).label("succeeded"),
            func.sum(counted.c.failed).label("failed"),
        )
        .where(counted.c.start >= first, counted.c.start < bindparam("b_end", type_=BigInteger()))
        .group_by(literal_column("bucket"))
        .order_by(literal_column("bucket"))
    )


class RollupRepository(Repository):
    async def day(self, group: UsageGroup, *, day: int, limit: int) -> list[DayRow]:
        """The day starting at UTC midnight `day` summed per `group` (a project or an agent
        CLI: `DAY_GROUPS`), the costliest first, at most `limit`."""
        rows = await self.rows(_day_statement(group), {"b_day": day, "b_limit": limit})
        return [DayRow(**asdict(_day_sums(row[1:])), key=str(row[0])) for row in rows]

    async def day_total(self, *, day: int) -> DaySums:
        [row] = await self.rows(_DAY_TOTAL, {"b_day": day})
        return _day_sums(row)

    async def throughput(
        self, *, first: int, end: int, bucket_ms: int
    ) -> list[tuple[int, int, int]]:
        """Results completed in [first, end), counted per bucket of `bucket_ms` from `first`
        (all three whole minutes): (bucket number, succeeded, failed), for the buckets that
        have any, in order."""
        span = next(
            (span for span in _COUNTED if not (first % span or end % span or bucket_ms % span)),
            None,
        )
        if span is None:
            raise ValueError("the rollups count whole minutes")
        params = {"b_first": first, "b_end": end, "b_bucket_ms": bucket_ms}
        return [
            (int(bucket), int(ok), int(failed))
            for bucket, ok, failed in await self.rows(_throughput_statement(span), params)
        ]


def _day_sums(row: Any) -> DaySums:
    attempts, succeeded, failed, cost, *counts = row
    return DaySums(int(attempts), int(succeeded), int(failed), float(cost), *map(int, counts))


def roll_in(tasks: Select[Any]) -> list[Any]:
    """PostgreSQL: the results of `tasks` summed into the rollups, for results inserted in bulk
    with the rolling trigger off, in their transaction. That transaction holds llm_results'
    lock (disabling a trigger takes it), and every other writer of a rollup writes a result
    first: none runs meanwhile. Each result goes to the slot a hash of its id picks, spread over
    the slots as a served runtime's transactions are (`txid % 32`), so that a filled database
    is read as one that grew in service is."""
    slot = func.hashtext(res.c.id).op("&")(SLOTS - 1)
    day = res.c.completed_at - res.c.completed_at % DAY_MS
    succeeded = func.sum(case((is_state(res.c.status, "success"), 1), else_=0))
    failed = func.sum(case((is_state(res.c.status, "success"), 0), else_=1))
    sums = [func.coalesce(func.sum(res.c[name]), 0) for name in USAGE_DAY_SUMS[3:]]
    of_tasks = res.c.task_id.in_(tasks)
    per_day = (
        select(day, tsk.c.agent_slug, tsk.c.cli, slot, func.count(), succeeded, failed, *sums)
        .select_from(res.join(tsk, tsk.c.id == res.c.task_id))
        .where(of_tasks)
        .group_by(day, tsk.c.agent_slug, tsk.c.cli, slot)
    )
    days = postgresql.insert(ud).from_select(
        ["day", "project", "cli", "slot", *USAGE_DAY_SUMS], per_day
    )
    statements = [
        days.on_conflict_do_update(
            index_elements=[ud.c.day, ud.c.project, ud.c.cli, ud.c.slot],
            set_={name: ud.c[name] + days.excluded[name] for name in USAGE_DAY_SUMS},
        )
    ]
    for span, counted in _COUNTED.items():
        start = res.c.completed_at - res.c.completed_at % span
        per_span = select(start, slot, succeeded, failed).where(of_tasks).group_by(start, slot)
        spans = postgresql.insert(counted).from_select(
            ["start", "slot", "succeeded", "failed"], per_span
        )
        statements.append(
            spans.on_conflict_do_update(
                index_elements=[counted.c.start, counted.c.slot],
                set_={n: counted.c[n] + spans.excluded[n] for n in ("succeeded", "failed")},
            )
        )
    return statements
