"""What one agent-CLI run amounts to, whatever the CLI (pure): what the process runner saw of
the run (`RunReport`), and what the worker reports of it (`Outcome`). Each adapter turns the
first into the second (`AgentCli.outcome`); the helpers here are shared by all of them.
"""

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bloom.clients.wire import CompleteRequest
from bloom.domain import approvals
from bloom.domain.retry import ErrorCode
from bloom.domain.states import ResultStatus
from bloom.domain.tool_calls import ToolCall
from bloom.domain.workspace import WorkspaceResult

JSON_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)
ERROR_TAIL = 2000
MAX_OUTPUT_JSON_BYTES = 4 * 1024 * 1024
"""An output must fit the runtime's request body limit (5 MiB by default) as JSON text."""


@dataclass(frozen=True, slots=True)
class RunReport:
    """What the process runner saw of one CLI run."""

    exit_code: int | None
    duration_ms: int
    result: dict[str, Any] | None = None
    """The CLI's final record, as its adapter's stream parser kept it (Claude: the `result`
    event), or None when none came."""
    stderr_tail: str = ""
    timed_out: bool = False
    timeout_sec: int = 0
    cancelled: bool = False


class OutcomeKind(StrEnum):
    """How an attempt ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAUSED = "paused"
    """Stopped on a tool call that needs a person's decision (`Outcome.pending`): the attempt
    ends, the session is kept, and a later run resumes it with the decision
    (`RunSpec.decisions`)."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A tool call the CLI deferred for a decision."""

    call_id: str
    tool: str
    input: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    """Why it waits (the rule that asks), as the person deciding is shown it."""

    def asked(self, session_id: str | None) -> approvals.PendingCall:
        """As the complete reports it: the call, in the session a decision resumes."""
        return approvals.PendingCall(self.call_id, self.tool, self.input, session_id, self.reason)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The complete call's content."""

    success: bool
    output: str | None = None
    error_message: str | None = None
    error_code: ErrorCode | None = None
    retry_at: int | None = None
    session_id: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    workspace: WorkspaceResult | None = None
    patch: str | None = None
    pending: PendingCall | None = None
    """Set when the run paused for a decision on this call (then `success` is False)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The run's tool calls and how each was decided (the worker's `ToolLog`)."""

    @property
    def kind(self) -> OutcomeKind:
        if self.pending is not None:
            return OutcomeKind.PAUSED
        return OutcomeKind.SUCCEEDED if self.success else OutcomeKind.FAILED

    def completion(self, lease_id: str, worker_id: str) -> CompleteRequest:
        """The complete call for this outcome, fenced by the attempt's lease."""
        return CompleteRequest(
            lease_id=lease_id,
            worker_id=worker_id,
            status=ResultStatus.SUCCESS if self.success else ResultStatus.ERROR,
            metrics=self.metrics,
            output=self.output,
            error_message=self.error_message
            or (
                f"Waiting for a person's decision on {self.pending.tool}" if self.pending else None
            ),
            error_code=ErrorCode.APPROVAL_REQUIRED if self.pending else self.error_code,
            retry_at=self.retry_at,
            session_id=self.session_id,
            workspace=self.workspace,
            patch=self.patch,
            approval=self.pending.asked(self.session_id) if self.pending else None,
            tool_calls=self.tool_calls,
        )


def answered(
    text: Any, *, desired_format: str, session_id: str | None, metrics: dict[str, Any]
) -> Outcome:
    """A run's answer as its outcome: a success with the text (cut to fit), or, asked for JSON
    and not JSON, an `invalid_output` failure."""
    output = text if isinstance(text, str) else ""
    if desired_format == "json":
        parsed = json_output(output)
        if parsed is None:
            return Outcome(
                success=False,
                error_message="desired_format is json, but the output is not JSON",
                error_code=ErrorCode.INVALID_OUTPUT,
                session_id=session_id,
                metrics=metrics,
            )
        output = parsed
    return Outcome(success=True, output=fit_output(output), session_id=session_id, metrics=metrics)


def json_output(text: str) -> str | None:
    """`text` as JSON text (a ```json fence removed), or None when it is not JSON."""
    stripped = text.strip()
    fenced = JSON_FENCE.match(stripped)
    candidate = fenced.group(1) if fenced else stripped
    try:
        json.loads(candidate)
    except ValueError:
        return None
    return candidate


def fit_output(text: str, limit: int = MAX_OUTPUT_JSON_BYTES) -> str:
    """`text`, cut (and saying so) where its JSON encoding would exceed `limit` bytes."""
    if len(text) * 12 + 2 <= limit or len(json.dumps(text)) <= limit:  # 12: a surrogate pair
        return text
    keep_low, keep_high = 0, len(text)
    while keep_low < keep_high:  # the longest prefix that fits, with room for the note
        middle = (keep_low + keep_high + 1) // 2
        if len(json.dumps(text[:middle])) <= limit - 200:
            keep_low = middle
        else:
            keep_high = middle - 1
    return (
        f"{text[:keep_low]}\n[output cut by the worker: {keep_low} of {len(text)} characters kept]"
    )


def epoch_ms(value: str) -> int:
    """An epoch time in seconds or milliseconds, as milliseconds."""
    number = int(value)
    return number if number >= 10**12 else number * 1000
