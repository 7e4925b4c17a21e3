"""`bloom`: one entry point for every process and tool.

Each command's module is imported only when that command runs (`cli/lazy.py`): this module
imports no more than Typer, so `bloom --help` and every `bloom …` process start fast."""

import os
import signal
import threading
from typing import Annotated

import typer

from bloom import __version__
from bloom.cli import lifeline
from bloom.cli.env_file import EnvFileError, load_env_file
from bloom.cli.lazy import LazyCommand, LazyGroup
from bloom.cli.output import fail

ARTIFACT_HELP = "Artifacts: read their content, move it between stores."
MEMORY_HELP = "Claude memory (claude-mem) synced between nodes through the bucket."


class BloomGroup(LazyGroup):
    lazy = (
        LazyCommand(
            "up",
            "bloom.cli.up:up",
            "Start the local stack: Membridge, the runtime and a worker (and the echo model with "
            "--demo-model), on SQLite under BLOOM_DATA_DIR (./.bloom). Ctrl-C stops it all.",
        ),
        LazyCommand(
            "bench", "bloom.cli.bench:bench", "Benchmark the lease engine through its HTTP API."
        ),
        LazyCommand("runtime", "bloom.cli.runtime:app", "The runtime server."),
        LazyCommand("db", "bloom.cli.db:app", "Database schema."),
        LazyCommand("membridge", "bloom.cli.membridge:app", "The Membridge control plane."),
        LazyCommand("memory", "bloom.cli.memory:app", MEMORY_HELP),
        LazyCommand("task", "bloom.cli.task:app", "Queue LLM tasks and follow them."),
        LazyCommand(
            "mcp",
            "bloom.cli.mcp:app",
            "Serve the fleet's tools to a Claude session over MCP (stdio): "
            "bloom mcp install adds it to Claude Code",
        ),
        LazyCommand(
            "usage",
            "bloom.cli.usage:usage",
            "What the fleet's work cost: cost, tokens, turns and attempts per project (a task's "
            "agent_slug), context, agent, worker, model, agent CLI, day or hour, today by default.",
        ),
        LazyCommand(
            "budget", "bloom.cli.budget:app", "Budgets per project: daily and monthly, in USD."
        ),
        LazyCommand(
            "policy",
            "bloom.cli.policy:app",
            "Tool policies per project: what its tasks' agents may do (allow, deny, mode).",
        ),
        LazyCommand(
            "approvals",
            "bloom.cli.approvals:app",
            "Tool calls waiting for a person: list them, approve or deny (admins, approvers).",
        ),
        LazyCommand(
            "worker",
            "bloom.cli.worker:app",
            "Workers: run one here, list the runtime's, approve their URLs, a node's agent key.",
        ),
        LazyCommand("artifact", "bloom.cli.artifact:app", ARTIFACT_HELP),
        # `bloom artifacts migrate` reads well
        LazyCommand("artifacts", "bloom.cli.artifact:app", ARTIFACT_HELP, hidden=True),
        LazyCommand("audit", "bloom.cli.audit:app", "The audit log."),
        LazyCommand(
            "key", "bloom.cli.access:keys", "API keys with a role: admin, worker or viewer."
        ),
        LazyCommand("user", "bloom.cli.access:users", "People who log in to the dashboard."),
        LazyCommand("claude", "bloom.cli.claude:app", "The Claude CLI the worker runs."),
        LazyCommand(
            "agents",
            "bloom.cli.agents:app",
            "The agent CLIs the worker runs (claude, codex, gemini): list what is here, "
            "install one.",
        ),
        LazyCommand(
            "echo-model",
            "bloom.cli.echo_model:app",
            "A stand-in for the Anthropic API that echoes every prompt (demos and tests).",
        ),
        LazyCommand(
            "deploy",
            "bloom.cli.deploy:app",
            "Deployment: the files for a host, and what to back up.",
        ),
    )


app = typer.Typer(
    cls=BloomGroup,
    help="BLOOM Runtime: queue LLM tasks, lease them to Claude CLI workers, keep every result.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def settings_file(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
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
