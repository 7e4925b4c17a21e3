"""What happens to a task after a failed attempt: retry later, fail for good, or die.

The worker reports *why* an attempt failed with an error code; the policy here turns the code,
the attempt count and the clock into the task's next state.
"""

from dataclasses import dataclass
from enum import StrEnum

from bloom.domain.states import TaskStatus


class ErrorCode(StrEnum):
    ERROR = "error"
    """Unclassified failure: retried with backoff while attempts remain."""
    CLI_ERROR = "cli_error"
    TIMEOUT = "timeout"
    INVALID_OUTPUT = "invalid_output"
    BUDGET_EXCEEDED = "budget_exceeded"
    """Retrying cannot help: the same prompt would spend the same budget."""
    FATAL = "fatal"
    """The worker knows retrying cannot help."""
    AUTH_FAILED = "auth_failed"
    """The Claude CLI has no credentials, or they were refused: an operator must act."""
    RATE_LIMITED = "rate_limited"
    """Overloaded or rate limited upstream: retry later without burning an attempt."""
    USAGE_LIMIT = "usage_limit"
    """Usage limit with a reset time: wait until `retry_at`, without burning an attempt."""
    CANCELLED = "cancelled"
    """The worker stopped because the task was cancelled."""
    APPROVAL_REQUIRED = "approval_required"
    """The run stopped at a tool call a person must decide on (the complete carries the call):
    the task waits for the decision, without burning an attempt."""


NON_RETRYABLE: frozenset[ErrorCode] = frozenset(
    {ErrorCode.BUDGET_EXCEEDED, ErrorCode.FATAL, ErrorCode.AUTH_FAILED}
)
FREE_RETRY: frozenset[ErrorCode] = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.USAGE_LIMIT})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff between attempts: base, base*factor, ... capped at `max_ms`."""

    base_ms: int = 15_000
    factor: float = 2.0
    max_ms: int = 600_000
    rate_limit_delay_ms: int = 60_000

    def backoff_ms(self, attempts: int) -> int:
        """Delay before the attempt that follows `attempts` finished attempts (1-based)."""
        exponent = min(max(attempts - 1, 0), 64)  # past 2**64 the cap has long applied
        return int(min(self.base_ms * self.factor**exponent, self.max_ms))


@dataclass(frozen=True, slots=True)
class Outcome:
    """The task's next state after a failed attempt."""

    status: TaskStatus
    not_before: int | None = None
    refund_attempt: bool = False


def failure_outcome(
    code: ErrorCode,
    *,
    attempts: int,
    max_attempts: int,
    now: int,
    retry_at: int | None,
    cancel_requested: bool,
    policy: RetryPolicy,
) -> Outcome:
    """Decide what a failed attempt (`attempts` already counts it) does to its task."""
    if cancel_requested or code is ErrorCode.CANCELLED:
        return Outcome(TaskStatus.CANCELLED)
    if code in NON_RETRYABLE:
        return Outcome(TaskStatus.FAILED)
    if code is ErrorCode.APPROVAL_REQUIRED:
        return Outcome(TaskStatus.AWAITING_APPROVAL, refund_attempt=True)
    if code in FREE_RETRY:
        delay_until = now + policy.rate_limit_delay_ms
        if retry_at is not None and retry_at > now:
            delay_until = retry_at
        return Outcome(TaskStatus.QUEUED, not_before=delay_until, refund_attempt=True)
    if attempts >= max_attempts:
        return Outcome(TaskStatus.DEAD)
    not_before = now + policy.backoff_ms(attempts)
    if retry_at is not None and retry_at > not_before:
        not_before = retry_at
    return Outcome(TaskStatus.QUEUED, not_before=not_before)


def expiry_outcome(*, attempts: int, max_attempts: int, cancel_requested: bool) -> TaskStatus:
    """Next state of a task whose lease expired: its worker is presumed gone.

    The attempt was counted when the lease was granted, so the task is requeued at once (another
    worker can start immediately) while attempts remain.
    """
    if cancel_requested:
        return TaskStatus.CANCELLED
    if attempts >= max_attempts:
        return TaskStatus.DEAD
    return TaskStatus.QUEUED
