"""What a `codex exec --json` run amounts to: the answer, or why it failed (pure).

The CLI reports a failure as text, in an `error` event and its `turn.failed` (the API's
status and message, after its own retries), or on stderr before any event (a session to resume
that is not there, a configuration it cannot read). What it says, recorded from 0.171.0:

(the CLI's apostrophes are typographic ones, written plainly here)

- "unexpected status 401 Unauthorized: Incorrect API key provided …", "Missing environment
  variable: `OPENAI_API_KEY`.", "… Please log out and sign in again." (a ChatGPT login spent)
- "You've hit your usage limit. … or try again at 2:36 PM." (a ChatGPT plan's window; a later
  day as "Jul 9th, 2026 1:47 AM"), "Quota exceeded. Check your plan and billing details."
- "exceeded retry limit, last status: 429 Too Many Requests", "We're currently experiencing
  high demand, which may cause temporary errors." (a 5xx)
"""

import re
from datetime import datetime, timedelta
from typing import Any

from bloom.domain.retry import ErrorCode
from bloom.domain.usage import MAX_MODEL_CHARS
from bloom.worker.agents.outcome import ERROR_TAIL, Outcome, RunReport, answered

AUTH_FAILURE = re.compile(
    r"\b401\b|\b403 Forbidden|unauthori[sz]ed|invalid_api_key|incorrect api key"
    r"|missing environment variable|not logged in|log out and sign in again|please (?:re-?)?login"
    r"|token (?:has )?expired|refresh token",
    re.IGNORECASE,
)
USAGE_LIMIT = re.compile(
    r"hit your usage limit|usage_limit_reached|usage limit has been reached|quota exceeded"
    r"|insufficient_quota",
    re.IGNORECASE,
)
RATE_LIMITED = re.compile(
    r"\b429\b|too many requests|rate.?limit|high demand|overloaded"
    r"|\b5\d\d (?:internal|service|bad)",
    re.IGNORECASE,
)
RESET_AT = re.compile(
    r"try again at (?:(?P<month>[A-Z][a-z]{2,8})\.? (?P<day>\d{1,2})(?:st|nd|rd|th)?,? "
    r"(?P<year>\d{4}),? )?(?P<hour>\d{1,2}):(?P<minute>\d{2}) ?(?P<half>[AP]M)",
    re.IGNORECASE,
)
ADVICE = (
    "set OPENAI_API_KEY (or CODEX_API_KEY), run `codex login` as the worker's user, or "
    "configure a provider for it (BLOOM_CODEX_ARGS, or config.toml in CODEX_HOME)"
)


def reset_time(text: str, now: datetime | None = None) -> int | None:
    """The epoch ms a usage-limit message says the limit ends ("try again at 2:36 PM", local
    time: the next such time; "… at Jul 9th, 2026 1:47 AM"), or None."""
    found = RESET_AT.search(text)
    if found is None:
        return None
    current = now or datetime.now().astimezone()
    hour = int(found["hour"]) % 12 + (12 if found["half"].upper() == "PM" else 0)
    minute = int(found["minute"])
    if found["month"]:
        try:
            day = datetime.strptime(
                f"{found['month'][:3]} {found['day']} {found['year']}", "%b %d %Y"
            )
        except ValueError:
            return None
        when = current.replace(
            year=day.year, month=day.month, day=day.day, hour=hour, minute=minute, second=0,
            microsecond=0,
        )  # fmt: skip
    else:
        when = current.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if when <= current:
            when += timedelta(days=1)
    return int(when.timestamp() * 1000)


def classify_error(text: str, now: datetime | None = None) -> tuple[ErrorCode, int | None]:
    """The error code (and reset time, epoch ms) for an error the CLI reported as text."""
    if USAGE_LIMIT.search(text):
        return ErrorCode.USAGE_LIMIT, reset_time(text, now)
    if AUTH_FAILURE.search(text):
        return ErrorCode.AUTH_FAILED, None
    if RATE_LIMITED.search(text):
        return ErrorCode.RATE_LIMITED, None
    return ErrorCode.CLI_ERROR, None


def metrics_of(report: RunReport) -> dict[str, Any]:
    """`duration_ms` always; tokens, cost (from the price table) and model when known."""
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


def _said(report: RunReport) -> str:
    """What the CLI said went wrong: its last error event, else stderr's tail."""
    errors = (report.result or {}).get("errors")
    if isinstance(errors, list) and errors:
        return str(errors[-1])
    return report.stderr_tail.strip() or f"the Codex CLI exited with code {report.exit_code}"


def decide(report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
    """Turn what the run did into the outcome to report."""
    metrics = metrics_of(report)
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
            f"Budget exceeded: spent ${cost:.4f} of ${budget_usd:g} (the Codex CLI has no "
            "budget of its own: its cost is counted once it ends)",
        )
    succeeded = (
        result is not None
        and result.get("completed")
        and not result.get("failed")
        and report.exit_code in (0, None)
    )
    if not succeeded:
        said = _said(report)
        code, retry_at = classify_error(said)
        if code is ErrorCode.AUTH_FAILED:
            said = f"The Codex CLI could not authenticate ({said}): {ADVICE}"
        elif code is ErrorCode.CLI_ERROR and result is None:
            said = f"Codex CLI exited with code {report.exit_code}: {said}"
        return failed(code, said, retry_at)
    assert result is not None
    return answered(
        result.get("text"), desired_format=desired_format, session_id=session_id, metrics=metrics
    )
