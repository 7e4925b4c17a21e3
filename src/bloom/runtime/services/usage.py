"""What the fleet's work cost: results' usage summed by project, context, worker, model, agent
CLI or time over a window (a scan of its results); and a day's per project or agent CLI as the
database keeps it (`usage_days`: a few rows, however many results the day holds)."""

from dataclasses import asdict

from bloom.domain.clock import Clock
from bloom.domain.errors import Invalid
from bloom.domain.usage import (
    DAY_GROUPS,
    MAX_USAGE_GROUPS,
    DayReport,
    UsageGroup,
    UsageReport,
    UsageRow,
    bucket_key,
    start_of_day,
)
from bloom.runtime.storage.repositories import RuntimeDatabase


class UsageService:
    def __init__(self, db: RuntimeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def report(
        self,
        group_by: UsageGroup,
        *,
        first: int | None = None,
        end: int | None = None,
        limit: int = MAX_USAGE_GROUPS,
    ) -> UsageReport:
        """Sums over results completed in [first, end): by default from today's UTC midnight
        to now (included). At most `limit` groups are listed (the costliest; for time, the
        earliest); the total covers the whole window."""
        now = self.clock()
        end = now + 1 if end is None else end  # now included
        first = start_of_day(now) if first is None else first
        if first > end:
            raise Invalid("from must not be after to")
        if not 1 <= limit <= MAX_USAGE_GROUPS:
            raise Invalid(f"limit must be between 1 and {MAX_USAGE_GROUPS}")
        async with self.db.read() as tx:
            rows = await tx.results.usage(group_by, first=first, end=end, limit=limit + 1)
            total = await tx.results.usage_total(first=first, end=end)
        timed = group_by.bucket_ms is not None
        groups = [
            UsageRow(**asdict(sums), key=bucket_key(int(key)) if timed else key)
            for key, sums in rows[:limit]
        ]
        return UsageReport(group_by, first, end, groups, total, truncated=len(rows) > limit)

    async def today(self, group_by: UsageGroup, *, limit: int = MAX_USAGE_GROUPS) -> DayReport:
        """Today's (UTC) usage per project or agent CLI, from the kept sums: the costliest
        `limit` groups, and the day's total. The figures `report` sums over today but the
        distinct tasks (not kept), and in the total the results of no task (a project unknown,
        none in service: tasks are never deleted)."""
        if group_by not in DAY_GROUPS:
            raise Invalid(f"a day's usage is kept per {', '.join(sorted(DAY_GROUPS))}")
        if not 1 <= limit <= MAX_USAGE_GROUPS:
            raise Invalid(f"limit must be between 1 and {MAX_USAGE_GROUPS}")
        day = start_of_day(self.clock())
        async with self.db.read() as tx:
            rows = await tx.rollups.day(group_by, day=day, limit=limit + 1)
            total = await tx.rollups.day_total(day=day)
        return DayReport(group_by, day, rows[:limit], total, truncated=len(rows) > limit)
