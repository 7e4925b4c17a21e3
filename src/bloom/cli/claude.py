"""`bloom claude …`: where the Claude CLI is, and fetching the pinned version."""

import typer

from bloom.cli.output import fail, say
from bloom.worker.agents.claude import install as claude_cli

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


@app.command()
def path() -> None:
    """Print the CLI's path (BLOOM_CLAUDE_BIN, else `claude` on PATH, else the cache).

    Exit status 1 when there is none: `bloom claude install` fetches it."""
    chosen = claude_cli.configured_claude()
    found = chosen or claude_cli.find_claude(claude_cli.cache_dir())
    if not found:
        fail(
            f"no Claude CLI on PATH or in {claude_cli.cache_dir()}; "
            "`bloom claude install` fetches it"
        )
    typer.echo(str(found))


@app.command()
def install(
    force: bool = typer.Option(False, "--force", help="Run npm even when it is already cached."),
) -> None:
    """Fetch the pinned Claude CLI into the cache (./.cache/claude-cli, or BLOOM_CLAUDE_CACHE)."""
    cache = claude_cli.cache_dir()
    existing = None if force else claude_cli.cached_binary(cache)
    if existing is not None:
        say(f"Claude CLI {claude_cli.PINNED_VERSION} already in the cache")
        typer.echo(str(existing))
        return
    try:
        binary = claude_cli.install_claude(cache, say)
    except claude_cli.ClaudeCliError as exc:
        fail(str(exc))
    typer.echo(str(binary))
