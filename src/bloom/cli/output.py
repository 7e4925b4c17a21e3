"""How every command speaks to a person on stderr (stdout keeps what scripts read)."""

from typing import Any, NoReturn

import typer


def say(message: str) -> None:
    """One plain line on stderr."""
    typer.echo(message, err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr (`bloom: …`), and the exit status."""
    typer.secho(f"bloom: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def print_json(value: Any) -> None:
    """`value` as indented JSON on standard output (what `--json` prints)."""
    import orjson  # only the commands that print JSON pay for it

    typer.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
