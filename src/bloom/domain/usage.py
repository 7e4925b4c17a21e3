"""What attempts cost: the usage figures a worker reports in a result's metrics, typed, and the
sums of them by project, context, worker, model, agent CLI or time that usage reports show."""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from bloom.domain.clock import utc_text
from bloom.domain.errors import Invalid

MAX_MODEL_CHARS = 128


@dataclass(frozen=True, slots=True)
class Usage:
    """Cost, tokens, turns, duration and model of one attempt; None where the worker said
    nothing (a result without usage is valid)."""

    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_used: int | None = None
    num_turns: int | None = None
    duration_ms: int | None = None
    model: str | None = None

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any]) -> "Usage":
        """The figures of a result's metrics that have the right type (a count is an int, never
        a bool; a cost any number); anything else is left out, not guessed."""
        cost = metrics.get("cost_usd")
        model = metrics.get("model")
        return cls(
            cost_usd=_amount(cost),
            input_tokens=_count(metrics.get("input_tokens")),
            output_tokens=_count(metrics.get("output_tokens")),
            tokens_used=_count(metrics.get("tokens_used")),
            num_turns=_count(metrics.get("num_turns")),
            duration_ms=_count(metrics.get("duration_ms")),
            model=model[:MAX_MODEL_CHARS] if isinstance(model, str) and model else None,
        )

    def columns(self) -> dict[str, Any]:
        return asdict(self)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _amount(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


DAY_MS = 86_400_000
HOUR_MS = 3_600_000
MAX_INSTANT_MS = 2**63 - 1
MAX_USAGE_GROUPS = 1_000
"""The most groups one usage answer lists (the total always covers all of them)."""


class UsageGroup(StrEnum):
    """What usage is summed by. A project is a task's `agent_slug` (the reference runs the CLI
    with it as `CLAUDE_PROJECT_ID`), so `agent` names the same key."""

    PROJECT = "project"
    AGENT = "agent"
    CONTEXT = "context"
    WORKER = "worker"
    MODEL = "model"
    CLI = "cli"
    """A task's agent CLI (`claude`, `codex`, `gemini`)."""
    DAY = "day"
    HOUR = "hour"

    @property
    def bucket_ms(self) -> int | None:
        """The length of a time group's buckets; None for the others."""
        return {UsageGroup.DAY: DAY_MS, UsageGroup.HOUR: HOUR_MS}.get(self)


@dataclass(frozen=True, slots=True)
class UsageSums:
    """Attempts (results) in a group and what they cost; sums count what was reported (a
    result without a figure adds nothing to its sum)."""

    attempts: int = 0
    tasks: int = 0
    succeeded: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_used: int = 0
    num_turns: int = 0
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class UsageRow(UsageSums):
    """One group's sums."""

    key: str | None = None
    """The project, context, worker, model or CLI (None: the results that name none); for a time
    group, the bucket's start as ISO 8601 UTC."""


@dataclass(frozen=True, slots=True)
class UsageReport:
    group_by: UsageGroup
    first: int
    """The window's start, epoch ms (inclusive)."""
    end: int
    """The window's end, epoch ms (exclusive)."""
    groups: list[UsageRow]
    total: UsageSums
    truncated: bool
    """More groups than listed (the largest by cost are listed)."""


DAY_GROUPS = frozenset({UsageGroup.PROJECT, UsageGroup.AGENT, UsageGroup.CLI})
"""The groups a day's usage is kept by (`usage_days`): a task's project (its agent_slug) and
its agent CLI."""


@dataclass(frozen=True, slots=True)
class DaySums:
    """A day's attempts and what they cost, as the database keeps them per day (`usage_days`,
    summed in the transaction of each result): `UsageSums` but the distinct tasks, which do not
    add up from one result to the next."""

    attempts: int = 0
    succeeded: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_used: int = 0
    num_turns: int = 0
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class DayRow(DaySums):
    """One group's sums for the day."""

    key: str = ""
    """The project or the agent CLI."""


@dataclass(frozen=True, slots=True)
class DayReport:
    """A UTC day's usage per group, the costliest first (the overview's cost today)."""

    group_by: UsageGroup
    day: int
    """The day's UTC midnight, epoch ms: the report covers [day, day + 24 h)."""
    groups: list[DayRow]
    total: DaySums
    truncated: bool
    """More groups than listed."""


def start_of_day(now: int) -> int:
    """The UTC midnight at or before `now` (epoch ms)."""
    return now - now % DAY_MS


def bucket_key(start: int) -> str:
    """A time bucket's start as ISO 8601 UTC, to the second."""
    return utc_text(start)


def parse_instant(text: str, name: str) -> int:
    """An instant given as epoch milliseconds or as ISO 8601 (a date, or a date and time; UTC
    when it names no zone), as epoch ms. Anything else, or an instant before 1970 or past what a
    database column holds, is `Invalid`, naming `name`."""
    refusal = Invalid(f"{name} must be epoch milliseconds or an ISO 8601 date or date-time")
    if text.isascii() and text.isdigit():
        at = int(text)
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise refusal from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        at = int(parsed.timestamp() * 1000)
    if not 0 <= at <= MAX_INSTANT_MS:
        raise refusal
    return at
