"""`bloom`: one entry point for every process and tool."""

import os
import signal
import threading

import typer

from bloom import __version__
from bloom.cli import (
    access,
    artifact,
    audit,
    bench,
    claude,
    db,
    deploy,
    echo_model,
    lifeline,
    membridge,
    memory,
    runtime,
    task,
    up,
    worker,
)
from bloom.cli.env_file import EnvFileError, load_env_file
from bloom.cli.output import fail

app = typer.Typer(
    help="BLOOM Runtime: queue LLM tasks, lease them to Claude CLI workers, keep every result.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(runtime.app, name="runtime")
app.add_typer(db.app, name="db")
app.add_typer(membridge.app, name="membridge")
app.add_typer(memory.app, name="memory")
app.add_typer(task.app, name="task")
app.add_typer(worker.app, name="worker")
app.add_typer(artifact.app, name="artifact")
app.add_typer(artifact.app, name="artifacts", hidden=True)  # `bloom artifacts migrate` reads well
app.add_typer(audit.app, name="audit")
app.add_typer(access.keys, name="key")
app.add_typer(access.users, name="user")
app.add_typer(claude.app, name="claude")
app.add_typer(echo_model.app, name="echo-model")
app.add_typer(deploy.app, name="deploy")
app.command("up")(up.up)
app.command("bench")(bench.bench)


@app.callback()
def settings_file() -> None:
    """Read BLOOM_ENV_FILE, when set, before any command (refused when others may read it).
    Ctrl-C always interrupts, even when the parent started us with SIGINT ignored (as a
    non-interactive shell does for `cmd &`): every command that waits says so on Ctrl-C.
    A child of `bloom up` stops when `bloom up` is gone (`lifeline`)."""
    if threading.current_thread() is threading.main_thread():  # (tests run commands in threads)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    lifeline.watch(os.environ)
    try:
        load_env_file(os.environ)
    except EnvFileError as exc:
        fail(str(exc), 2)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


if __name__ == "__main__":
    app()
