"""SQL for the results' rollups (`usage_days`, `result_minutes`) as migration 0019's triggers keep
them, summed over their slots: a day's usage per project or agent CLI, and the results per bucket
of whole minutes, reads of a few rows however many results they sum.

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
    literal,
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
    task_counts,
    usage_days,
)

ud, rm, res, tsk = usage_days, result_minutes, llm_results, llm_tasks

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


_FIRST = bindparam("b_first", type_=BigInteger())
_THROUGHPUT = (
    select(
        ((rm.c.minute - _FIRST) // bindparam("b_bucket_ms", type_=BigInteger())).label("bucket"),
        func.sum(rm.c.succeeded).label("succeeded"),
        func.sum(rm.c.failed).label("failed"),
    )
    .where(rm.c.minute >= _FIRST, rm.c.minute < bindparam("b_end", type_=BigInteger()))
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
        (both whole minutes): (bucket number, succeeded, failed), for the buckets that have
        any, in order."""
        if first % MINUTE_MS or bucket_ms % MINUTE_MS or end % MINUTE_MS:
            raise ValueError("the rollup counts whole minutes")
        params = {"b_first": first, "b_end": end, "b_bucket_ms": bucket_ms}
        return [
            (int(bucket), int(ok), int(failed))
            for bucket, ok, failed in await self.rows(_THROUGHPUT, params)
        ]


def _day_sums(row: Any) -> DaySums:
    attempts, succeeded, failed, cost, *counts = row
    return DaySums(int(attempts), int(succeeded), int(failed), float(cost), *map(int, counts))


def roll_in(tasks: Select[Any]) -> list[Any]:
    """PostgreSQL: the results of `tasks` summed into slot 0 of the rollups, for results inserted
    in bulk with the rolling trigger off (in their transaction, which holds llm_results' lock:
    no other result is written meanwhile). The slot's `task_counts` row is locked first, as the
    trigger does."""
    day = res.c.completed_at - res.c.completed_at % DAY_MS
    minute = res.c.completed_at - res.c.completed_at % MINUTE_MS
    succeeded = func.sum(case((is_state(res.c.status, "success"), 1), else_=0))
    failed = func.sum(case((is_state(res.c.status, "success"), 0), else_=1))
    sums = [func.coalesce(func.sum(res.c[name]), 0) for name in USAGE_DAY_SUMS[3:]]
    of_tasks = res.c.task_id.in_(tasks)
    per_day = (
        select(day, tsk.c.agent_slug, tsk.c.cli, literal(0), func.count(), succeeded, failed, *sums)
        .select_from(res.join(tsk, tsk.c.id == res.c.task_id))
        .where(of_tasks)
        .group_by(day, tsk.c.agent_slug, tsk.c.cli)
    )
    per_minute = select(minute, literal(0), succeeded, failed).where(of_tasks).group_by(minute)
    days = postgresql.insert(ud).from_select(
        ["day", "project", "cli", "slot", *USAGE_DAY_SUMS], per_day
    )
    minutes = postgresql.insert(rm).from_select(
        ["minute", "slot", "succeeded", "failed"], per_minute
    )
    return [
        select(task_counts.c.slot).where(task_counts.c.slot == 0).with_for_update(key_share=True),
        days.on_conflict_do_update(
            index_elements=[ud.c.day, ud.c.project, ud.c.cli, ud.c.slot],
            set_={name: ud.c[name] + days.excluded[name] for name in USAGE_DAY_SUMS},
        ),
        minutes.on_conflict_do_update(
            index_elements=[rm.c.minute, rm.c.slot],
            set_={name: rm.c[name] + minutes.excluded[name] for name in ("succeeded", "failed")},
        ),
    ]
