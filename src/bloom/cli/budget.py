"""`bloom budget`: what a project (a task's agent_slug) may spend per UTC day and month."""

import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bloom.cli.output import fail, print_json
from bloom.cli.remote import DEFAULT_URL, JsonOption, UrlOption, ago, call, err, out, when

app = typer.Typer(no_args_is_help=True, help="Budgets per project: daily and monthly, in USD.")

Project = Annotated[str, typer.Argument(metavar="PROJECT", help="A task's agent_slug.")]


@app.command("set")
def set_budget(
    project: Project,
    daily: Annotated[float | None, typer.Option(min=0, help="USD per UTC day.")] = None,
    monthly: Annotated[float | None, typer.Option(min=0, help="USD per UTC month.")] = None,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Set a project's daily and monthly budget (admin).

    Once its spend in a window reaches the limit, its queued tasks wait (nothing fails) until
    the window resets or the budget is raised; running tasks finish. A limit of 0 stops the
    project's new work at once."""
    if daily is None and monthly is None:
        fail("give --daily, --monthly or both (to remove a budget: bloom budget remove)")
    view = call(url, lambda c: c.set_budget(project, daily_usd=daily, monthly_usd=monthly))
    if json_output:
        print_json(view)
        return
    out().print(_line(view, time.time_ns() // 1_000_000))


@app.command("list")
def list_budgets(json_output: JsonOption = False, url: UrlOption = DEFAULT_URL) -> None:
    """Every budget: its limits, today's and this month's spend, whether its tasks wait."""
    views = call(url, lambda client: client.budgets())
    if json_output:
        print_json(views)
        return
    if not views:
        err().print("no budgets: bloom budget set PROJECT --daily 5")
        return
    now = time.time_ns() // 1_000_000
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("project", "today", "this month", "state"):
        table.add_column(column, no_wrap=True)
    for view in views:
        table.add_row(
            escape(str(view["project"])),
            _spent(view["spent_today_usd"], view["daily_usd"]),
            _spent(view["spent_month_usd"], view["monthly_usd"]),
            _state(view, now),
        )
    out().print(table)


@app.command("remove")
def remove(project: Project, url: UrlOption = DEFAULT_URL) -> None:
    """Remove a project's budget (admin): its waiting tasks run again."""
    call(url, lambda client: client.remove_budget(project))
    out().print(f"budget of {escape(project)} removed")


def _line(view: Any, now: int) -> str:
    return (
        f"{escape(str(view['project']))}: today "
        f"{_spent(view['spent_today_usd'], view['daily_usd'])}, this month "
        f"{_spent(view['spent_month_usd'], view['monthly_usd'])}; {_state(view, now)}"
    )


def _spent(spent: float, limit: float | None) -> str:
    return f"${spent:,.2f}" + (f" of ${limit:,.2f}" if limit is not None else " (no limit)")


def _state(view: Any, now: int) -> str:
    until = view.get("held_until")
    if until:
        return f"[yellow]spent: tasks wait until {when(until)} ({ago(until, now)})[/]"
    return "[green]running[/]"
