"""`bloom mcp`: the fleet as tools in a Claude session (the Model Context Protocol, on stdio), and
`bloom mcp install`, which adds this very command to Claude Code's configuration."""

import asyncio
import contextlib
import shlex
import subprocess
import sys
from enum import StrEnum
from typing import Annotated

import typer

from bloom.cli.output import fail, say
from bloom.cli.remote import DEFAULT_URL, UrlOption, api_key
from bloom.worker.agents.claude import install as claude_cli

app = typer.Typer(invoke_without_command=True)  # its help: bloom.cli.main's


class Scope(StrEnum):
    local = "local"
    user = "user"
    project = "project"


@app.callback()
def mcp(ctx: typer.Context, url: UrlOption = DEFAULT_URL) -> None:
    """Serve the fleet's tools to a Claude session over MCP (stdio); `bloom mcp install` adds
    this server to Claude Code.

    The Model Context Protocol on standard input and output, for Claude Code and other MCP
    clients. Its tools queue tasks on the runtime, wait for them with their live output as
    progress, and read results, workers and the queue. The key comes from BLOOM_API_KEY (or
    RUNTIME_API_KEY); a viewer key gets the read tools only. See docs/mcp.md."""
    if ctx.invoked_subcommand is not None:
        return
    from bloom.mcp.server import serve_stdio

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_stdio(url, api_key()))


def server_command() -> list[str]:
    """This `bloom mcp`, by absolute paths: it runs from any directory, with or without PATH."""
    return [sys.executable, "-m", "bloom.cli.main", "mcp"]


@app.command()
def install(
    url: UrlOption = DEFAULT_URL,
    scope: Annotated[
        Scope,
        typer.Option(help="Claude Code's scope: this directory, every project, or .mcp.json"),
    ] = Scope.local,
    name: Annotated[str, typer.Option(help="The server's name in Claude Code")] = "bloom",
) -> None:
    """Add `bloom mcp` to Claude Code with `claude mcp add`.

    The server runs as this bloom, by absolute path, with BLOOM_RUNTIME_URL and, when set,
    BLOOM_API_KEY (with --scope project, whose .mcp.json is shared, as ${BLOOM_API_KEY}). The
    Claude CLI is BLOOM_CLAUDE_BIN, else `claude` on PATH, else the cache's."""
    cache = claude_cli.cache_dir()
    claude = claude_cli.configured_claude() or claude_cli.find_claude(cache)
    if not claude:
        fail(f"no Claude CLI on PATH or in {cache}; `bloom claude install` fetches it", 2)
    env = [f"BLOOM_RUNTIME_URL={url}"]
    if key := api_key():
        env.append("BLOOM_API_KEY=" + ("${BLOOM_API_KEY}" if scope is Scope.project else key))
    options = [arg for pair in env for arg in ("-e", pair)]
    argv = [str(claude), "mcp", "add", "--scope", scope.value, name, *options, "--"]
    argv += server_command()
    say(shlex.join([arg.replace(key, "***") for arg in argv] if key else argv))
    done = subprocess.run(argv, check=False)  # noqa: S603 - argv built by us, no shell
    if done.returncode != 0:
        fail(f"`claude mcp add` failed (exit {done.returncode})", 1)
    say(f"added: `claude mcp list` shows {name}; in a session, /mcp")
