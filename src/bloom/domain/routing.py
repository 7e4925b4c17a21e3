"""Which worker gets a task: the seed's `pickWorker`, made deterministic and sticky by context."""

from collections.abc import Iterable
from dataclasses import dataclass

from bloom.domain.states import WorkerStatus


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """A worker as routing sees it: declared capacity and live active-lease count."""

    id: str
    status: str
    claude_cli: bool
    max_concurrency: int
    active_leases: int
    last_heartbeat: int | None

    @property
    def free_slots(self) -> int:
        return self.max_concurrency - self.active_leases

    @property
    def is_candidate(self) -> bool:
        return self.status == WorkerStatus.ONLINE and self.claude_cli and self.free_slots > 0


def pick_worker(workers: Iterable[WorkerLoad], sticky_worker_id: str | None) -> WorkerLoad | None:
    """The sticky worker when it can take the task, else most free slots, then freshest heartbeat.

    Ties fall to the smaller id so that the choice never depends on row order.
    """
    candidates = [w for w in workers if w.is_candidate]
    if sticky_worker_id is not None:
        for worker in candidates:
            if worker.id == sticky_worker_id:
                return worker
    if not candidates:
        return None
    return min(candidates, key=lambda w: (-w.free_slots, -(w.last_heartbeat or 0), w.id))
