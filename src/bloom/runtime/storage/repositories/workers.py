"""SQL for `workers`: the registry, and the row lock that serialises lease grants per worker."""

from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    Text,
    bindparam,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.columns import JSONType
from bloom.db.repository import Repository, entity_columns, entity_values, is_state, to_entity
from bloom.domain.claims import Glance
from bloom.domain.fleet import Agent
from bloom.domain.models import Worker
from bloom.runtime.storage.repositories.claiming import WALKING
from bloom.runtime.storage.repositories.keepers import has_cli, queued_now
from bloom.runtime.storage.tables import leases, llm_tasks, workers

WORKER_COLUMNS = entity_columns(workers, Worker)
w = workers

_GET = select(*WORKER_COLUMNS).where(w.c.id == bindparam("b_id"))
_LOCK = _GET.with_for_update()
# Bound to the worker id rather than correlated: SQLite renders RETURNING without table names,
# so a correlated `leases.worker_id = workers.id` there would compare the lease with itself.
_HAS_ASSIGNED = (
    exists()
    .where(
        leases.c.worker_id == bindparam("b_id"),
        is_state(leases.c.status, "active"),
        leases.c.claimed_at.is_(None),
    )
    .label("has_assigned")
)
_ACTIVE_NOW = (
    select(func.count())
    .select_from(leases)
    .where(leases.c.worker_id == bindparam("b_id"), is_state(leases.c.status, "active"))
    .scalar_subquery()
    .label("active_now")
)
_CHECK_IN = (
    update(w)
    .where(w.c.id == bindparam("b_id"))
    .values(last_heartbeat=bindparam("b_now"), status="online", source="api")
    .returning(*WORKER_COLUMNS, _HAS_ASSIGNED, _ACTIVE_NOW)
)
_LOCK_WITH_ASSIGNED = (
    select(*WORKER_COLUMNS, _HAS_ASSIGNED, _ACTIVE_NOW)
    .where(w.c.id == bindparam("b_id"))
    .with_for_update(of=w)
)
_GLANCE = select(
    *WORKER_COLUMNS,
    _HAS_ASSIGNED,
    _ACTIVE_NOW,
    exists().select_from(llm_tasks).where(*queued_now()).label("queue_ready"),
).where(w.c.id == bindparam("b_id"))
_SEEN_AMONG = {
    "postgresql": w.c.id == func.any(bindparam("b_ids", type_=postgresql.ARRAY(String()))),
    "sqlite": w.c.id.in_(
        select(func.json_each(bindparam("b_ids", type_=JSONType)).table_valued("value").c.value)
    ),
}
# Only forward, and only for a worker still online: a worker set offline since is brought back
# by its next claim's check-in, not by a sign of life noted before.
_SEEN = {
    kind: update(w)
    .where(
        among,
        is_state(w.c.status, "online"),
        or_(w.c.last_heartbeat.is_(None), w.c.last_heartbeat < bindparam("b_now")),
    )
    .values(last_heartbeat=bindparam("b_now"))
    for kind, among in _SEEN_AMONG.items()
}
# PostgreSQL: the same, setting the claim's plan settings for the rest of the transaction (the
# tasks repository's `WALKING`), a round trip less per look.
_CHECK_IN_WALKING = _CHECK_IN.returning(WALKING)
_LOCK_WITH_ASSIGNED_WALKING = _LOCK_WITH_ASSIGNED.add_columns(WALKING)
_LIST = select(*WORKER_COLUMNS).order_by(w.c.id)
_INSERT_NEW = {
    kind: dialect.insert(w).on_conflict_do_nothing(index_elements=[w.c.id]).returning(w.c.id)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_UPDATE = update(w).where(w.c.id == bindparam("b_id")).returning(*WORKER_COLUMNS)
_MARK_GONE = (
    update(w)
    .where(
        w.c.id == bindparam("b_id"),
        is_state(w.c.status, "online"),
        or_(w.c.last_heartbeat.is_(None), w.c.last_heartbeat <= bindparam("b_silent_since")),
    )
    .values(status="offline")
    .returning(w.c.id)
)
_FROM_MEMBRIDGE = is_state(w.c.source, "membridge")
# Membridge's view of an agent: only for workers known through Membridge alone; a worker that
# spoke to the runtime itself keeps its own word, and only the "listed at" time moves. Its URL is
# never taken: it is only proposed (pending_url), and an admin approves it.
_APPLY_AGENT = (
    update(w)
    .where(w.c.id == bindparam("b_id"))
    .values(
        membridge_seen_at=bindparam("b_now"),
        pending_url=case((_FROM_MEMBRIDGE, bindparam("b_pending_url")), else_=w.c.pending_url),
        status=case((_FROM_MEMBRIDGE, bindparam("b_status")), else_=w.c.status),
        capabilities=case(
            (_FROM_MEMBRIDGE, bindparam("b_capabilities", type_=JSONType)), else_=w.c.capabilities
        ),
        ip_addrs=case(
            (_FROM_MEMBRIDGE, bindparam("b_ip_addrs", type_=JSONType)), else_=w.c.ip_addrs
        ),
        last_heartbeat=case(
            (
                _FROM_MEMBRIDGE,
                func.coalesce(bindparam("b_last_seen", type_=BigInteger()), w.c.last_heartbeat),
            ),
            else_=w.c.last_heartbeat,
        ),
    )
    .returning(w.c.id)
)
_MARK_QUIET = (
    update(w)
    .where(
        w.c.id == bindparam("b_id"),
        is_state(w.c.status, "online"),
        func.coalesce(w.c.membridge_seen_at, 0) < bindparam("b_cutoff"),
        func.coalesce(w.c.last_heartbeat, 0) < bindparam("b_cutoff"),
    )
    .values(status="offline")
    .returning(w.c.id)
)
_HEARD_THROUGH_MEMBRIDGE = (
    update(w)
    .where(
        w.c.id == bindparam("b_id"),
        func.coalesce(w.c.membridge_seen_at, 0) < bindparam("b_seen"),
    )
    .values(
        membridge_seen_at=bindparam("b_seen"),
        # alive again, or for the first time: but not against the worker's own later word
        status=case(
            (
                or_(is_state(w.c.status, "offline"), is_state(w.c.status, "unknown"))
                & (func.coalesce(w.c.last_heartbeat, 0) < bindparam("b_seen")),
                "online",
            ),
            else_=w.c.status,
        ),
    )
    .returning(w.c.id)
)
_PAUSE = update(w).where(w.c.id == bindparam("b_id")).values(paused_until=bindparam("b_until"))
_DELETE = delete(w).where(w.c.id == bindparam("b_id")).returning(w.c.id)
_ONLINE_WITHOUT_CLI = select(
    exists().where(is_state(w.c.status, "online"))
    & ~exists().where(is_state(w.c.status, "online"), has_cli(w, bindparam("b_cli", type_=Text)))
)
_TOTALS = select(func.count(), func.count().filter(is_state(w.c.status, "online")))


def _counted(values: dict[str, Any]) -> tuple[Worker, bool]:
    """The worker of a row of its columns, `has_assigned` and `active_now` (taken out of
    `values`), with `active_leases` counted; and whether a pushed lease awaits delivery."""
    has_assigned = bool(values.pop("has_assigned"))
    values["active_leases"] = values.pop("active_now")
    return to_entity(Worker, values), has_assigned


class WorkerRepository(Repository):
    async def get(self, worker_id: str) -> Worker | None:
        return await self.one(Worker, _GET, {"b_id": worker_id})

    async def lock(self, worker_id: str) -> Worker | None:
        """Read the worker and hold its row lock to the end of the transaction.

        Every lease grant to a worker takes this lock first, so counting its active leases and
        inserting a new one cannot interleave with another grant to the same worker.
        """
        return await self.one(Worker, _LOCK, {"b_id": worker_id})

    async def check_in(
        self, worker_id: str, now: int, *, touch: bool
    ) -> tuple[Worker, bool] | None:
        """Lock the worker's row for a claim (like `lock`), and say whether a lease granted to it
        awaits delivery. With `touch`, the claim is also a sign of life: online, seen now.

        On PostgreSQL the same statement sets the claim's plan setting for the rest of the
        transaction (`TaskRepository.walking`).

        The worker comes with `active_leases` counted, as the statement saw them: a hint (the
        claim statement counts again, after the lock), which may miss a grant or a release made
        while this statement waited for the lock."""
        params = {"b_id": worker_id, "b_now": now}
        if self.is_postgres:
            statement = _CHECK_IN_WALKING if touch else _LOCK_WITH_ASSIGNED_WALKING
        else:
            statement = _CHECK_IN if touch else _LOCK_WITH_ASSIGNED
        rows = await self.run(statement, params)
        if not rows:
            return None
        values = dict(rows[0])
        values.pop("walking", None)
        return _counted(values)

    async def glance(self, worker_id: str, now: int) -> Glance | None:
        """The worker, its leases and the queue at `now`, in one read; None: no such worker."""
        rows = await self.run(_GLANCE, {"b_id": worker_id, "b_now": now})
        if not rows:
            return None
        values = dict(rows[0])
        queue_ready = bool(values.pop("queue_ready"))
        return Glance(*_counted(values), queue_ready)

    async def seen(self, worker_ids: list[str], now: int) -> None:
        """These workers were heard from (a claim that found nothing) by `now`: their
        `last_heartbeat` moves up to it, the online ones'."""
        await self.run(_SEEN[self.kind], {"b_ids": worker_ids, "b_now": now})

    async def find(self) -> list[Worker]:
        return await self.all(Worker, _LIST, {})

    async def insert_new(self, worker: Worker) -> bool:
        """Insert unless a worker with this id exists; True when inserted."""
        result = await self.run(_INSERT_NEW[self.kind], entity_values(worker, WORKER_COLUMNS))
        return bool(result)

    async def update(self, worker_id: str, values: dict[str, Any]) -> Worker | None:
        return await self.one(Worker, _UPDATE, values | {"b_id": worker_id})

    async def mark_gone(self, worker_id: str, silent_since: int) -> bool:
        """Set an online worker offline unless it has shown itself (claim, registration) after
        `silent_since`; True when it was set offline."""
        params = {"b_id": worker_id, "b_silent_since": silent_since}
        return bool(await self.run(_MARK_GONE, params))

    async def apply_agent(self, agent: Agent, pending_url: str | None, now: int) -> None:
        """Record that Membridge lists `agent` now (see `_APPLY_AGENT` for what changes); its
        URL only ever as `pending_url`, a proposal for an admin to approve."""
        params = {
            "b_id": agent.id,
            "b_now": now,
            "b_pending_url": pending_url,
            "b_status": agent.status,
            "b_capabilities": agent.capabilities,
            "b_ip_addrs": agent.ip_addrs,
            "b_last_seen": agent.last_seen,
        }
        await self.run(_APPLY_AGENT, params)

    async def mark_quiet(self, worker_id: str, cutoff: int) -> bool:
        """Set an online worker offline if nothing was heard of it since `cutoff`, directly or
        through Membridge; True when it was set offline."""
        return bool(await self.run(_MARK_QUIET, {"b_id": worker_id, "b_cutoff": cutoff}))

    async def heard_through_membridge(self, worker_id: str, seen_at: int) -> bool:
        """Note a node heartbeat Membridge received at `seen_at` (epoch ms) from this worker's
        node: a sign of life, which sets an offline or unknown worker online unless the worker
        itself spoke later. True when the worker exists and the sighting was news."""
        params = {"b_id": worker_id, "b_seen": seen_at}
        return bool(await self.run(_HEARD_THROUGH_MEMBRIDGE, params))

    async def pause(self, worker_id: str, until: int) -> None:
        """The worker takes no work before `until` (epoch ms); the pause simply lapses."""
        await self.run(_PAUSE, {"b_id": worker_id, "b_until": until})

    async def delete(self, worker_id: str) -> bool:
        return bool(await self.run(_DELETE, {"b_id": worker_id}))

    async def none_online_with_cli(self, cli: str) -> bool:
        """Whether workers are online but none can run the agent CLI `cli` (`has_cli`)."""
        return bool(await self.scalar(_ONLINE_WITHOUT_CLI, {"b_cli": cli}))

    async def totals(self) -> tuple[int, int]:
        """(all workers, online workers)."""
        [(total, online)] = await self.rows(_TOTALS)
        return int(total), int(online or 0)
