"""What a `gemini --output-format stream-json` run amounts to: the answer, or why it failed
(pure).

The CLI reports a failure in its `result` event (`status: "error"`, `error.message`: the API's
error after its own retries, as `[API Error: …]`), or on stderr before any event (a session to
resume that is not there, an authentication it cannot use). What it says, recorded from 0.61.0:

- `[API Error: {"error":{"code":400,"message":"API key not valid. Please pass a valid API
  key.","status":"INVALID_ARGUMENT",…"reason":"API_KEY_INVALID"…}}]`, the same with `403` and
  `PERMISSION_DENIED`, "When using Gemini API, you must specify the GEMINI_API_KEY environment
  variable.", "Please set an Auth method in your …settings.json…"
- `[API Error: You exceeded your current quota, please check your plan and billing details. …
  Please retry in 3595s.\\nSuggested retry after 3595s.]\\nPlease wait and try again later. …`
  (a 429 `RESOURCE_EXHAUSTED` whose delay is over five minutes: the CLI does not retry it),
  "You have exhausted your daily quota on this model."
- a 429 with a shorter delay, a 503 `UNAVAILABLE` ("The model is overloaded."): retried by the
  CLI (ten attempts, with backoff), then said as they are.
"""

import re
import time
from collections.abc import Callable

from bloom.domain.retry import ErrorCode
from bloom.worker.agents.outcome import Outcome, RunReport, recorded_outcome

AUTH_FAILURE = re.compile(
    r"API key not valid|API_KEY_INVALID|\b401\b|UNAUTHENTICATED|\b403\b|PERMISSION_DENIED"
    r"|must specify the GEMINI_API_KEY|must specify either|Please set an Auth method"
    r"|Invalid auth method|unregistered callers|invalid authentication credentials"
    r"|Failed to (?:login|refresh)|reauthenticat",
    re.IGNORECASE,
)
USAGE_LIMIT = re.compile(
    r"exceeded your current quota|exhausted your daily quota|quota exceeded|insufficient.credits"
    r"|exhausted your capacity",
    re.IGNORECASE,
)
RATE_LIMITED = re.compile(
    r"\b429\b|(?-i:RESOURCE_EXHAUSTED|UNAVAILABLE|\bINTERNAL\b)|resource (?:has been )?exhausted"
    r"|too many requests|rate.?limit|\b503\b|overloaded|high demand|\b500\b",
    re.IGNORECASE,
)
RETRY_IN = re.compile(
    r"(?:Please retry in|Suggested retry after|\"retryDelay\":\s*\")\s*(?P<value>[0-9.]+)"
    r"(?P<unit>ms|s)\b",
    re.IGNORECASE,
)
ADVICE = (
    "set GEMINI_API_KEY (or GOOGLE_API_KEY with GOOGLE_GENAI_USE_VERTEXAI), log the worker's "
    "user in with `gemini`, or list the variables it needs in BLOOM_GEMINI_ENV"
)


def retry_time(text: str, now: Callable[[], float] = time.time) -> int | None:
    """The epoch ms an error's delay ends ("Please retry in 39.6s", "Suggested retry after
    3600s", a `retryDelay`), counted from `now`; None when it says none."""
    found = RETRY_IN.search(text)
    if found is None:
        return None
    seconds = float(found["value"]) / (1000 if found["unit"].lower() == "ms" else 1)
    return int((now() + seconds) * 1000)


def classify_error(text: str, now: Callable[[], float] = time.time) -> tuple[ErrorCode, int | None]:
    """The error code (and the end of its delay, epoch ms) for an error the CLI reported."""
    if USAGE_LIMIT.search(text):
        return ErrorCode.USAGE_LIMIT, retry_time(text, now)
    if AUTH_FAILURE.search(text):
        return ErrorCode.AUTH_FAILED, None
    if RATE_LIMITED.search(text):
        return ErrorCode.RATE_LIMITED, retry_time(text, now)
    return ErrorCode.CLI_ERROR, None


def decide(report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
    """Turn what the run did into the outcome to report."""
    return recorded_outcome(
        report,
        desired_format=desired_format,
        budget_usd=budget_usd,
        title="Gemini",
        classify=classify_error,
        advice=ADVICE,
    )
