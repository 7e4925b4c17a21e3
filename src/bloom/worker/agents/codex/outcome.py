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

from bloom.domain.retry import ErrorCode
from bloom.worker.agents.outcome import Outcome, RunReport, recorded_outcome

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


def decide(report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
    """Turn what the run did into the outcome to report."""
    return recorded_outcome(
        report,
        desired_format=desired_format,
        budget_usd=budget_usd,
        title="Codex",
        classify=classify_error,
        advice=ADVICE,
    )
