"""How every command speaks to a person on stderr (stdout keeps what scripts read)."""

from typing import NoReturn

import typer


def say(message: str) -> None:
    """One plain line on stderr."""
    typer.echo(message, err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr (`bloom: …`), and the exit status."""
    typer.secho(f"bloom: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)
