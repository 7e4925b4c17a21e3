"""What a Claude CLI run amounts to: the result to report and, for a failure, why (pure).

The CLI ends a `stream-json` run with one `result` event (`result`, `is_error`, `session_id`,
`total_cost_usd`, `usage`, `num_turns`). API errors arrive there as text: "API Error: 529
Overloaded …", "API Error: Request rejected (429) · Claude AI usage limit reached|<epoch s>".
"""

import re
from typing import Any

from bloom.domain.approvals import summary
from bloom.domain.retry import ErrorCode
from bloom.domain.usage import MAX_MODEL_CHARS
from bloom.worker.agents.claude.credentials import auth_failure_message, is_auth_failure
from bloom.worker.agents.outcome import (
    ERROR_TAIL,
    Outcome,
    PendingCall,
    RunReport,
    answered,
    epoch_ms,
)

USAGE_LIMIT = re.compile(r"usage limit reached(?:\|(\d{9,13}))?", re.IGNORECASE)
RATE_LIMITED = re.compile(r"\b(429|529)\b|overloaded|rate.?limit", re.IGNORECASE)


def metrics_of(report: RunReport) -> dict[str, Any]:
    """`duration_ms` always; tokens, cost and turns when the CLI reported them."""
    metrics: dict[str, Any] = {"duration_ms": report.duration_ms, "tokens_used": None}
    result = report.result or {}
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
    if usage:
        inputs = sum(
            int(usage.get(key) or 0)
            for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        outputs = int(usage.get("output_tokens") or 0)
        metrics |= {
            "input_tokens": inputs,
            "output_tokens": outputs,
            "tokens_used": inputs + outputs,
        }
    if isinstance(result.get("total_cost_usd"), int | float):
        metrics["cost_usd"] = float(result["total_cost_usd"])
    if isinstance(result.get("num_turns"), int):
        metrics["num_turns"] = result["num_turns"]
    model = _main_model(result.get("modelUsage"))
    if model is not None:
        metrics["model"] = model
    return metrics


def _main_model(per_model: Any) -> str | None:
    """The model that cost the most in the CLI's `modelUsage` (a run can use a small model for
    chores beside its main one)."""
    if not isinstance(per_model, dict):
        return None
    costs = {
        name: float(usage.get("costUSD") or 0) if isinstance(usage, dict) else 0.0
        for name, usage in per_model.items()
        if isinstance(name, str) and name
    }
    return max(costs, key=costs.__getitem__)[:MAX_MODEL_CHARS] if costs else None


def _error_text(result: dict[str, Any]) -> str:
    text = result.get("result")
    if isinstance(text, str) and text.strip():
        return text.strip()
    errors = result.get("errors")
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors)
    return f"Claude CLI reported an error ({result.get('subtype', 'unknown')})"


def classify_error(text: str) -> tuple[ErrorCode, int | None]:
    """The error code (and reset time, epoch ms) for an error the CLI reported as text."""
    if is_auth_failure(text):
        return ErrorCode.AUTH_FAILED, None
    usage = USAGE_LIMIT.search(text)
    if usage:
        return ErrorCode.USAGE_LIMIT, epoch_ms(usage.group(1)) if usage.group(1) else None
    if RATE_LIMITED.search(text):
        return ErrorCode.RATE_LIMITED, None
    return ErrorCode.CLI_ERROR, None


def decide(report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
    """Turn what the run did into the outcome to report."""
    metrics = metrics_of(report)
    result = report.result
    session_id = result.get("session_id") if result else None
    session = session_id if isinstance(session_id, str) else None

    def failed(code: ErrorCode, message: str, retry_at: int | None = None) -> Outcome:
        return Outcome(
            success=False,
            error_message=message[-ERROR_TAIL:],
            error_code=code,
            retry_at=retry_at,
            session_id=session,
            metrics=metrics,
        )

    cost = metrics.get("cost_usd")
    deferred = result.get("deferred_tool_use") if result else None
    if result is not None and result.get("stop_reason") == "tool_deferred" and deferred:
        return _paused(deferred, session, metrics)
    if report.cancelled:
        return failed(ErrorCode.CANCELLED, "Cancelled while running")
    if report.timed_out:
        return failed(ErrorCode.TIMEOUT, f"Timed out after {report.timeout_sec}s")
    if budget_usd > 0 and (
        (result is not None and result.get("subtype") == "error_max_budget_usd")
        or (cost is not None and cost > budget_usd)
    ):
        spent = f"${cost:.4f}" if cost is not None else "more"
        return failed(
            ErrorCode.BUDGET_EXCEEDED, f"Budget exceeded: spent {spent} of ${budget_usd:g}"
        )
    if result is not None and result.get("subtype") == "error_max_turns":
        said = _error_text(result) or "Reached the maximum number of turns"
        return failed(
            ErrorCode.FATAL, f"{said}: the task's turn limit (policy.tools.max_turns) stopped it"
        )
    if result is None:
        detail = report.stderr_tail.strip() or "no result event"
        if is_auth_failure(detail):
            return failed(ErrorCode.AUTH_FAILED, auth_failure_message(detail))
        return failed(
            ErrorCode.CLI_ERROR, f"Claude CLI exited with code {report.exit_code}: {detail}"
        )
    if result.get("is_error") or report.exit_code not in (0, None):
        said = _error_text(result)
        code, retry_at = classify_error(said)
        message = auth_failure_message(said) if code is ErrorCode.AUTH_FAILED else said
        return failed(code, message, retry_at)
    return answered(
        result.get("result"), desired_format=desired_format, session_id=session, metrics=metrics
    )


def _paused(deferred: Any, session: str | None, metrics: dict[str, Any]) -> Outcome:
    """The run stopped at a call its hook deferred (a task's `ask` rule): it waits for a
    person's decision (docs/approvals.md)."""
    call = deferred if isinstance(deferred, dict) else {}
    tool = str(call.get("name") or "a tool")
    given = call.get("input")
    tool_input: dict[str, Any] = given if isinstance(given, dict) else {}
    return Outcome(
        success=False,
        error_message=f"Waiting for a person's decision on {summary(tool, tool_input)}",
        error_code=ErrorCode.APPROVAL_REQUIRED,
        session_id=session,
        metrics=metrics,
        pending=PendingCall(str(call.get("id") or ""), tool, tool_input),
    )
