"""SQL for `queue_samples`: the queue's depth once a minute, written once per minute whichever
process gets there first, and read back for a window."""

from sqlalchemy import bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository
from bloom.domain.history import DepthSample
from bloom.runtime.storage.tables import queue_samples

qs = queue_samples

_INSERT_IF_ABSENT = {
    kind: dialect.insert(qs).on_conflict_do_nothing(index_elements=[qs.c.at]).returning(qs.c.at)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_BETWEEN = (
    select(qs.c.at, qs.c.queued, qs.c.running)
    .where(qs.c.at >= bindparam("b_from"), qs.c.at < bindparam("b_to"))
    .order_by(qs.c.at)
)
_PRUNE = delete(qs).where(qs.c.at < bindparam("b_before")).returning(qs.c.at)


class SampleRepository(Repository):
    async def add(self, sample: DepthSample) -> bool:
        """Store `sample` unless its minute has one already; True when it was stored."""
        values = {"at": sample.at, "queued": sample.queued, "running": sample.running}
        return bool(await self.run(_INSERT_IF_ABSENT[self.kind], values))

    async def between(self, start: int, end: int) -> list[DepthSample]:
        """The samples of the minutes in [start, end), oldest first."""
        return await self.all(DepthSample, _BETWEEN, {"b_from": start, "b_to": end})

    async def prune(self, before: int) -> int:
        """Delete the samples older than `before`; how many there were."""
        return len(await self.run(_PRUNE, {"b_before": before}))
