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
    paused_until: int | None = None
    ready: bool = True
    """False when the worker says it cannot run Claude now (no credentials)."""

    @property
    def free_slots(self) -> int:
        return self.max_concurrency - self.active_leases

    @property
    def is_candidate(self) -> bool:
        """Online, runs Claude CLI tasks, ready, has a free slot (a pause is judged by
        `available`)."""
        return (
            self.status == WorkerStatus.ONLINE
            and self.claude_cli
            and self.ready
            and self.free_slots > 0
        )

    def is_paused(self, now: int) -> bool:
        return self.paused_until is not None and self.paused_until > now

    def available(self, now: int) -> bool:
        """A candidate that is not paused at `now` (epoch ms)."""
        return self.is_candidate and not self.is_paused(now)


def pick_worker(
    workers: Iterable[WorkerLoad], sticky_worker_id: str | None, now: int | None = None
) -> WorkerLoad | None:
    """The sticky worker when it can take the task, else most free slots, then freshest heartbeat.

    With `now` (epoch ms), a worker paused past it is no candidate; without, pauses are not
    judged. Ties fall to the smaller id so that the choice never depends on row order.
    """
    candidates = [w for w in workers if (w.is_candidate if now is None else w.available(now))]
    if sticky_worker_id is not None:
        for worker in candidates:
            if worker.id == sticky_worker_id:
                return worker
    if not candidates:
        return None
    return min(candidates, key=lambda w: (-w.free_slots, -(w.last_heartbeat or 0), w.id))
