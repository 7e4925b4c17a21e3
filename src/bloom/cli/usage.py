"""`bloom usage`: what the fleet's work cost, per project (or context, agent, worker, model, agent
CLI, day, hour), as a table or JSON."""

import re
import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bloom.cli.output import fail, print_json
from bloom.cli.remote import DEFAULT_URL, JsonOption, UrlOption, call, out
from bloom.domain.errors import Invalid
from bloom.domain.usage import UsageGroup, parse_instant

DURATION = re.compile(r"^(\d+)([mhdw])$")
UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def usage(
    by: Annotated[UsageGroup, typer.Option("--by", help="What to sum by.")] = UsageGroup.PROJECT,
    since: Annotated[
        str,
        typer.Option(
            help="Start of the window: 'today' (UTC midnight), a duration back from now "
            "(30m, 12h, 7d, 2w), epoch ms or an ISO 8601 date or date-time."
        ),
    ] = "today",
    until: Annotated[
        str | None, typer.Option(help="End of the window (epoch ms or ISO 8601); default now.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many rows.")] = 50,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """What the fleet's work cost: cost, tokens, turns and attempts per project (a task's
    agent_slug), context, agent, worker, model, agent CLI, day or hour, today by default.

    Sums count what workers reported (an attempt without usage adds nothing); days are UTC."""
    first = window_start(since, time.time_ns() // 1_000_000)
    report = call(url, lambda client: client.usage(by, since=first, until=until, limit=limit))
    if json_output:
        print_json(report)
        return
    out().print(usage_table(report))


SINCE_TAKES = (
    "--since takes 'today', a duration back from now (30m, 12h, 7d, 2w), epoch ms or an "
    "ISO 8601 date or date-time (2026-11-27, 2026-11-27T08:00Z)"
)


def window_start(since: str, now_ms: int) -> str | None:
    """The `from` to ask for: None for today (the server's default), now minus a duration, or
    the instant given (epoch ms or ISO 8601); anything else is a usage error (exit 2)."""
    if since == "today":
        return None
    duration = DURATION.match(since)
    if duration is not None:
        return str(max(now_ms - int(duration[1]) * UNIT_MS[duration[2]], 0))
    try:
        return str(parse_instant(since, "--since"))
    except Invalid:
        fail(f"{SINCE_TAKES}, not {since!r}", 2)


def usage_table(report: Any) -> Table:
    by = str(report["group_by"])
    table = Table(box=None, header_style="bold", pad_edge=False, show_footer=True)
    total = report["total"]
    columns = [
        (by, "total"),
        ("cost", _cost(total["cost_usd"])),
        ("attempts", str(total["attempts"])),
        ("failed", str(total["failed"])),
        ("tasks", str(total["tasks"])),
        ("input tokens", f"{total['input_tokens']:,}"),
        ("output tokens", f"{total['output_tokens']:,}"),
        ("turns", str(total["num_turns"])),
        ("run time", _seconds(total["duration_ms"])),
    ]
    for n, (header, footer) in enumerate(columns):
        table.add_column(header, footer, justify="left" if n == 0 else "right", no_wrap=True)
    for group in report["groups"]:
        table.add_row(
            escape(str(group["key"])) if group["key"] is not None else "-",
            _cost(group["cost_usd"]),
            str(group["attempts"]),
            str(group["failed"]),
            str(group["tasks"]),
            f"{group['input_tokens']:,}",
            f"{group['output_tokens']:,}",
            str(group["num_turns"]),
            _seconds(group["duration_ms"]),
        )
    if report.get("truncated"):
        table.caption = "more rows than shown (--limit); the total counts them all"
    return table


def _cost(usd: float) -> str:
    return f"${usd:,.4f}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:,.1f} s"
