"""Which worker a pushed lease goes to (the seed's `lease`): the one named, or the one
`pick_worker` chooses, its row locked with a free slot counted under the lock."""

from dataclasses import replace

from bloom.domain.errors import Invalid, Unavailable
from bloom.domain.models import Task, Worker
from bloom.domain.routing import WorkerLoad, pick_worker
from bloom.runtime.storage.repositories import Repositories

NO_WORKER = "No available worker with free capacity"


async def reserve_slot(
    tx: Repositories, task: Task, worker_id: str | None, now: int, *, need_url: bool
) -> Worker:
    """Lock and return a worker with a free slot for `task`, not paused at `now` (and with an
    agent URL when `need_url`), or raise Unavailable (Invalid: the named one has no URL)."""
    if worker_id is not None:
        locked = await tx.workers.lock(worker_id)
        if locked is None:
            raise Unavailable(NO_WORKER)
        if need_url and not locked.url:
            raise Invalid(f'Worker "{worker_id}" has no URL configured')
        worker = await _counted(tx, locked)
        load = _load(worker, worker.active_leases)
        if not worker.ready:
            raise Unavailable(f"Worker '{worker_id}' is not ready (it cannot run Claude)")
        if not load.is_candidate:
            raise Unavailable(f"Worker '{worker_id}' is not online with a free slot")
        if load.is_paused(now):
            raise Unavailable(f"Worker '{worker_id}' is paused until {worker.paused_until}")
        return worker
    counts = await tx.leases.active_counts()
    loads = {
        w.id: _load(w, counts.get(w.id, 0))
        for w in await tx.workers.find()
        if w.url or not need_url
    }
    sticky = await tx.leases.latest_worker_for_context(task.context_id)
    while (choice := pick_worker(loads.values(), sticky, now)) is not None:
        locked = await tx.workers.lock(choice.id)
        if locked is not None:
            worker = await _counted(tx, locked)
            if _load(worker, worker.active_leases).available(now):
                return worker
        del loads[choice.id]  # filled up (or vanished) since we looked: try the next
    raise Unavailable(NO_WORKER)


def _load(worker: Worker, active: int) -> WorkerLoad:
    return WorkerLoad(
        id=worker.id,
        status=worker.status,
        claude_cli=worker.claude_cli,
        max_concurrency=worker.max_concurrency,
        active_leases=active,
        last_heartbeat=worker.last_heartbeat,
        paused_until=worker.paused_until,
        ready=worker.ready,
    )


async def _counted(tx: Repositories, worker: Worker) -> Worker:
    """The worker with `active_leases` counted from its live leases."""
    return replace(worker, active_leases=await tx.leases.count_active_for_worker(worker.id))
