"""Stalled runs: an attempt whose CLI has printed nothing for longer than its policy's
`stall_sec` while its heartbeats go on (a heartbeat only proves the worker is alive).

A task's `policy.stall_sec` (0: never stalled) and `policy.on_stall` (`flag`, the default: noticed,
shown and audited; `retry`: the attempt is also stopped and the task retried, as a lost lease's)
say what a stall is for it; without a `stall_sec` the runtime's default (`BLOOM_STALL_SEC`)
applies. Output is any event the worker posted, stored or dropped past the task's events limit.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

DEFAULT_STALL_SEC = 600
"""The runtime's default when `BLOOM_STALL_SEC` is not set."""
MIN_STALL_SEC = 30
MAX_STALL_SEC = 86_400
"""A policy's `stall_sec` is 0 (off) or within these (seconds)."""


class OnStall(StrEnum):
    FLAG = "flag"
    RETRY = "retry"


def stall_sec_problem(value: int) -> str | None:
    """Why `value` cannot be a `stall_sec` (0, or MIN_STALL_SEC..MAX_STALL_SEC); None if it can."""
    if value == 0 or MIN_STALL_SEC <= value <= MAX_STALL_SEC:
        return None
    return f"Must be 0 (off) or {MIN_STALL_SEC}..{MAX_STALL_SEC} seconds"


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """What a stall is for one task: seconds without output (0: never), and what is done then."""

    stall_sec: int
    on_stall: OnStall = OnStall.FLAG

    @classmethod
    def of(cls, policy: Mapping[str, Any], default_sec: int) -> "StallPolicy":
        """A task's, from its stored policy: its own `stall_sec` (else `default_sec`) and
        `on_stall` (else `flag`); a mistyped value counts as absent."""
        own = policy.get("stall_sec")
        seconds = own if isinstance(own, int) and not isinstance(own, bool) else default_sec
        action = policy.get("on_stall")
        on_stall = OnStall(action) if action in tuple(OnStall) else OnStall.FLAG
        return cls(max(seconds, 0), on_stall)


def silent_since(*, started_at: int, claimed_at: int | None, last_output_at: int | None) -> int:
    """Since when an attempt has printed nothing (epoch ms): its task's newest output if that
    came after the attempt reached its worker (a task's output spans all its attempts), else
    the moment it did (`claimed_at`; `started_at`, the lease's grant, before that)."""
    start = claimed_at if claimed_at is not None else started_at
    return start if last_output_at is None else max(start, last_output_at)


def is_stalled(now: int, since: int, policy: StallPolicy) -> bool:
    """Whether a run silent `since` (epoch ms) is stalled at `now` under `policy`: silent for
    longer than its `stall_sec`, which is not 0."""
    return policy.stall_sec > 0 and now - since > policy.stall_sec * 1000


@dataclass(frozen=True, slots=True)
class Stall:
    """A running attempt found stalled: its lease and worker, when it was found so
    (`stalled_at`), and since when it has printed nothing (`silent_since`), in epoch ms."""

    lease_id: str
    worker_id: str
    stalled_at: int
    silent_since: int

    def silent_for(self, now: int) -> str:
        """How long it has printed nothing at `now`, as people say it."""
        return silence(now - self.silent_since)


def silence(ms: int) -> str:
    """A time without output: `45 s` under two minutes, else whole minutes (`12 min`)."""
    seconds = max(ms, 0) // 1000
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"
