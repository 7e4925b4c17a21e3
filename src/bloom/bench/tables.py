"""What every mode's table for people ends with: the figures, then the errors seen."""

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table


def figures_table(title: str, rows: Iterable[tuple[str, str]]) -> Table:
    """A two-column table of figures and their values."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for figure, value in rows:
        table.add_row(figure, value)
    return table


def print_errors(
    console: Console, errors: int, samples: list[str], *, ok: bool, requests: int | None = None
) -> None:
    """The count of errors (green when the run is `ok`), the requests sent, and the samples."""
    sent = "" if requests is None else f" ({requests} requests)"
    console.print(f"[{'green' if ok else 'bold red'}]errors: {errors}[/]{sent}")
    for sample in samples:
        console.print(f"  [red]{sample}[/]", markup=False)
