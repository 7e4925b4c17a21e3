"""SQL for `task_counts`: tasks per status and leases ever granted, as the database's own triggers
keep them (migration 0011), summed over their slots: a read of a few rows, however many tasks.

`RECOUNT` sets them from a full count, for a bulk fill that ran with the triggers off."""

from typing import Any

from sqlalchemy import func, select, update

from bloom.db.repository import Repository
from bloom.runtime.storage.tables import leases, llm_tasks, task_counts

STATUS_COLUMNS = [c for c in task_counts.c if c.name not in ("slot", "leases")]
"""One column per task status, named as the status."""

_SUMS = select(*(func.coalesce(func.sum(c), 0).label(c.name) for c in STATUS_COLUMNS)).add_columns(
    func.coalesce(func.sum(task_counts.c.leases), 0).label("leases")
)

RECOUNT: list[Any] = [
    update(task_counts).values({c.name: 0 for c in (*STATUS_COLUMNS, task_counts.c.leases)}),
    update(task_counts)
    .where(task_counts.c.slot == 0)
    .values(
        {
            c.name: select(func.count())
            .select_from(llm_tasks)
            .where(llm_tasks.c.status == c.name)
            .scalar_subquery()
            for c in STATUS_COLUMNS
        }
        | {"leases": select(func.count()).select_from(leases).scalar_subquery()}
    ),
]
"""Every count from the tables themselves, into slot 0 (the others zeroed). Exact only while no
other transaction changes tasks or leases: run it holding their locks."""


class CountRepository(Repository):
    async def totals(self) -> tuple[dict[str, int], int]:
        """(tasks per status, every status named; leases ever granted), as of one snapshot: the
        counts of exactly the changes committed before it."""
        [row] = await self.run(_SUMS)
        values = {str(name): int(value) for name, value in row.items()}
        return {str(c.name): values[c.name] for c in STATUS_COLUMNS}, values["leases"]
