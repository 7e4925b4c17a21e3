"""Budgets per project: how much a project (a task's `agent_slug`) may spend per UTC day and per
UTC month, and what a charge against them means: a warning at 80 %, a hold on the project's
queued tasks until the spent window resets. Pure: spend and time are passed in."""

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from bloom.domain.usage import DAY_MS, start_of_day

WARN_AT = 0.8
"""The share of a budget at which a warning is given."""
MAX_BUDGET_USD = 1_000_000.0


class Window(StrEnum):
    DAILY = "daily"
    MONTHLY = "monthly"


@dataclass(frozen=True, slots=True)
class Budget:
    """A project's limits (None: no limit for that window) and, while it is spent, until when
    its queued tasks are held."""

    project: str
    daily_usd: float | None
    monthly_usd: float | None
    held_until: int | None
    updated_at: int
    updated_by: str

    def limit(self, window: Window) -> float | None:
        return self.daily_usd if window is Window.DAILY else self.monthly_usd

    def hold_at(self, now: int) -> int | None:
        """Until when the project's tasks wait, if they wait at `now`."""
        return self.held_until if self.held_until is not None and self.held_until > now else None


@dataclass(frozen=True, slots=True)
class Spend:
    """What a project spent in the current UTC day and month, in US dollars."""

    today: float = 0.0
    month: float = 0.0

    def of(self, window: Window) -> float:
        return self.today if window is Window.DAILY else self.month


@dataclass(frozen=True, slots=True)
class Crossing:
    """A charge took a project's spend in `window` past a mark: `WARN_AT` or the whole budget."""

    window: Window
    exhausted: bool
    spent: float
    limit: float


def start_of_month(now: int) -> int:
    """The UTC midnight of the first of `now`'s month (epoch ms)."""
    day = datetime.fromtimestamp(now / 1000, UTC)
    return int(datetime(day.year, day.month, 1, tzinfo=UTC).timestamp() * 1000)


def next_month(now: int) -> int:
    """The UTC midnight of the first of the month after `now`'s."""
    day = datetime.fromtimestamp(now / 1000, UTC)
    year, month = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
    return int(datetime(year, month, 1, tzinfo=UTC).timestamp() * 1000)


def utc_minute(at: int) -> str:
    """An instant as people read a reset time: `2026-11-27 00:00 UTC`."""
    return f"{datetime.fromtimestamp(at / 1000, UTC):%Y-%m-%d %H:%M} UTC"


def reset_of(window: Window, now: int) -> int:
    """When `window`'s spend starts again from zero."""
    return start_of_day(now) + DAY_MS if window is Window.DAILY else next_month(now)


def held_until(budget: Budget, spend: Spend, now: int) -> int | None:
    """Until when the project's tasks wait: the latest reset among the windows it has spent
    (a limit of 0 is spent at once); None while every window has budget left."""
    resets = [
        reset_of(window, now)
        for window in Window
        if (limit := budget.limit(window)) is not None and spend.of(window) >= limit
    ]
    return max(resets, default=None)


def crossings(budget: Budget, before: Spend, after: Spend) -> list[Crossing]:
    """The marks a charge passed (each once: the charge that takes spend from below a mark to
    at or above it)."""
    passed: list[Crossing] = []
    for window in Window:
        limit = budget.limit(window)
        if limit is None or limit <= 0:
            continue
        was, now = before.of(window), after.of(window)
        if was < limit <= now:
            passed.append(Crossing(window, True, now, limit))
        elif was < limit * WARN_AT <= now:
            passed.append(Crossing(window, False, now, limit))
    return passed
