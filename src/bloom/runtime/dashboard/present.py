"""How values read on a page: relative and absolute times, durations, sizes, short ids.

Pure functions, time passed in, so that the templates stay free of arithmetic and the rules can
be tested alone.
"""

import json
from collections.abc import Mapping
from datetime import UTC, datetime

UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def duration(ms: int | float | None) -> str:
    """`850 ms`, `12 s`, `3 min 20 s`, `2 h 5 min`, `4 d 1 h`: the two largest units."""
    if ms is None:
        return "—"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms} ms"
    parts: list[str] = []
    rest = ms
    for size, unit in UNITS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count} {unit}")
        if len(parts) == 2:
            break
    return " ".join(part for part in parts if not part.startswith("0 ")) or "0 s"


def ago(at_ms: int | float | None, now_ms: int) -> str:
    """`just now`, `5 s ago`, `3 min ago`, `in 2 min` (a time ahead, such as a lease's expiry)."""
    if at_ms is None:
        return "never"
    delta = now_ms - int(at_ms)
    if abs(delta) < 1000:
        return "just now"
    span = duration(abs(delta)).split(" ")
    text = " ".join(span[:2])
    return f"{text} ago" if delta > 0 else f"in {text}"


def absolute(at_ms: int | float | None) -> str:
    """ISO 8601 in UTC to the second: what a `<time>` element's title shows on hover."""
    if at_ms is None:
        return ""
    return datetime.fromtimestamp(int(at_ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(at_ms: int | float | None) -> str:
    """The machine-readable form, for `<time datetime=…>` (the page's script keeps it fresh)."""
    if at_ms is None:
        return ""
    return datetime.fromtimestamp(int(at_ms) / 1000, UTC).isoformat(timespec="milliseconds")


def size(n: int | None) -> str:
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover (the loop always returns)


def short(identifier: str | None, length: int = 8) -> str:
    """An id's last characters: ids are UUIDv7, whose head is the time (alike for ids made
    together) and whose tail is random."""
    return (identifier or "")[-length:]


def clip(text: str | None, length: int = 80) -> str:
    """One line of at most `length` characters, an ellipsis where it was cut."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= length else flat[: length - 1] + "…"


def usd(amount: float | None) -> str:
    """A cost in dollars: cents, and four decimals for what costs less than a dime (a short
    Claude run costs a fraction of a cent)."""
    if amount is None:
        return "—"
    return f"${amount:.4f}" if 0 < amount < 0.1 else f"${amount:,.2f}"


def percent(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio * 100:.1f}%"


def policy_items(policy: Mapping[str, object]) -> list[tuple[str, str]]:
    """A task's policy as (name, value) pairs, by name: `timeout_sec` 120 as `timeout` `2 min`,
    numbers alike (`0.0` and `0` both `0`), anything nested as JSON, empty values left out."""
    return [
        (name.removesuffix("_sec").replace("_", " "), _setting(name, value))
        for name, value in sorted(policy.items())
        if value not in (None, "", [], {})
    ]


def _setting(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if name == "stall_sec" and value == 0:
            return "off"
        if name.endswith("_sec"):
            return duration(value * 1000)
        return f"{int(value) if float(value).is_integer() else value:,}"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def as_ms(value: object) -> int | None:
    """A timestamp from Membridge in epoch ms: values below 10^12 are seconds (the reference UI's
    rule), anything not a number is None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value * 1000) if value < 1e12 else int(value)
