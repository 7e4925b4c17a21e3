"""What one agent-CLI run amounts to, whatever the CLI (pure): what the process runner saw of
the run (`RunReport`), and what the worker reports of it (`Outcome`). Each adapter turns the
first into the second (`AgentCli.outcome`); the helpers here are shared by all of them.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bloom.clients.wire import CompleteRequest
from bloom.domain import approvals
from bloom.domain.retry import ErrorCode
from bloom.domain.states import ResultStatus
from bloom.domain.tool_calls import ToolCall
from bloom.domain.usage import MAX_MODEL_CHARS
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


def record_metrics(report: RunReport) -> dict[str, Any]:
    """`duration_ms` always; tokens, cost and model when the final record has them (a record
    with `usage` {`input_tokens`, `output_tokens`}, `cost_usd`, `model`: the Codex and Gemini
    adapters' parsers keep one)."""
    metrics: dict[str, Any] = {"duration_ms": report.duration_ms, "tokens_used": None}
    result = report.result or {}
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
    if usage:
        inputs = int(usage.get("input_tokens") or 0)
        outputs = int(usage.get("output_tokens") or 0)
        metrics |= {
            "input_tokens": inputs,
            "output_tokens": outputs,
            "tokens_used": inputs + outputs,
        }
    if isinstance(result.get("cost_usd"), int | float):
        metrics["cost_usd"] = float(result["cost_usd"])
    if isinstance(result.get("model"), str) and result["model"]:
        metrics["model"] = result["model"][:MAX_MODEL_CHARS]
    return metrics


def recorded_outcome(
    report: RunReport,
    *,
    desired_format: str,
    budget_usd: float,
    title: str,
    classify: Callable[[str], tuple[ErrorCode, int | None]],
    advice: str,
) -> Outcome:
    """The outcome of a run whose parser kept a final record of `session_id`, `text`, `usage`,
    `cost_usd`, `model`, `errors` (what the CLI said failed), `completed` and `failed` (the
    Codex and Gemini adapters'). It succeeded when a turn completed, none failed and the CLI
    exited 0; else the error is the last one it said (stderr's tail when it said none), as
    `classify` reads it. A CLI with no budget of its own: a cost above `budget_usd` fails the
    run once it ends."""
    metrics = record_metrics(report)
    result = report.result
    session = result.get("session_id") if result else None
    session_id = session if isinstance(session, str) and session else None

    def failed(code: ErrorCode, message: str, retry_at: int | None = None) -> Outcome:
        return Outcome(
            success=False,
            error_message=message[-ERROR_TAIL:],
            error_code=code,
            retry_at=retry_at,
            session_id=session_id,
            metrics=metrics,
        )

    if report.cancelled:
        return failed(ErrorCode.CANCELLED, "Cancelled while running")
    if report.timed_out:
        return failed(ErrorCode.TIMEOUT, f"Timed out after {report.timeout_sec}s")
    cost = metrics.get("cost_usd")
    if budget_usd > 0 and cost is not None and cost > budget_usd:
        return failed(
            ErrorCode.BUDGET_EXCEEDED,
            f"Budget exceeded: spent ${cost:.4f} of ${budget_usd:g} (the {title} CLI has no "
            "budget of its own: its cost is counted once it ends)",
        )
    succeeded = (
        result is not None
        and result.get("completed")
        and not result.get("failed")
        and report.exit_code in (0, None)
    )
    if not succeeded:
        errors = (result or {}).get("errors")
        said = (
            str(errors[-1])
            if isinstance(errors, list) and errors
            else report.stderr_tail.strip()
            or f"the {title} CLI exited with code {report.exit_code}"
        )
        code, retry_at = classify(said)
        if code is ErrorCode.AUTH_FAILED:
            said = f"The {title} CLI could not authenticate ({said}): {advice}"
        elif code is ErrorCode.CLI_ERROR and result is None:
            said = f"{title} CLI exited with code {report.exit_code}: {said}"
        return failed(code, said, retry_at)
    assert result is not None
    return answered(
        result.get("text"), desired_format=desired_format, session_id=session_id, metrics=metrics
    )
