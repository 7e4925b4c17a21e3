"""What a claim's look concludes when it grants nothing, and what a read alone may conclude
before the look is made (`LeaseService._first_look`)."""

from dataclasses import dataclass
from enum import Enum

from bloom.domain.models import Worker
from bloom.domain.states import WorkerStatus


class Missed(Enum):
    """Why a claim's look got no task."""

    NOTHING = "nothing"
    """No task there the worker may take."""
    UNABLE = "unable"
    """The worker takes no task now: offline, paused, or every slot taken."""


@dataclass(frozen=True, slots=True)
class Glance:
    """A worker as a claim's first look would find it, read without its row lock: `worker`
    with `active_leases` counted, whether a lease pushed to it awaits delivery, and whether any
    task is queued past its backoff (some claim, maybe not this worker's, may take it)."""

    worker: Worker
    has_assigned: bool
    queue_ready: bool


def missed_at_a_glance(glance: Glance | None, now: int) -> Missed | None:
    """What a claim's first look would find, when a read already tells that it finds nothing;
    None when only the look itself can tell (it grants, delivers, brings the worker online, or
    refuses it). Only tasks queued past their backoff make a look worth its write: a claim
    woken later looks again, so a look skipped here loses nothing.

    A worker holding a lease always looks: its sign of life must be written at once, since the
    reaper judges whether it went silent after that lease's last heartbeat (`mark_gone`)."""
    if glance is None or glance.has_assigned:
        return None
    worker = glance.worker
    if worker.status != WorkerStatus.ONLINE or worker.source != "api" or not worker.claude_cli:
        return None
    if worker.active_leases > 0:
        return None
    paused = worker.paused_until is not None and worker.paused_until > now
    if not worker.ready or paused or worker.max_concurrency <= 0:
        return Missed.UNABLE
    return None if glance.queue_ready else Missed.NOTHING
