"""How every command speaks to a person on stderr (stdout keeps what scripts read)."""

import shutil
import sys
import textwrap
from typing import Any, NoReturn

import typer


def say(message: str) -> None:
    """One plain line on stderr."""
    typer.echo(message, err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr (`bloom: …`), and the exit status."""
    typer.secho(wrapped(f"bloom: {message}"), err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def wrapped(text: str) -> str:
    """`text` wrapped at whole words to the terminal's width when stderr is a terminal; as it
    is (one line a message, for scripts and logs) otherwise."""
    if not sys.stderr.isatty():
        return text
    width = max(shutil.get_terminal_size().columns, 20)
    wrap = textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(wrap.fill(line) for line in text.splitlines())


def print_json(value: Any) -> None:
    """`value` as indented JSON on standard output (what `--json` prints)."""
    import orjson  # only the commands that print JSON pay for it

    typer.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
