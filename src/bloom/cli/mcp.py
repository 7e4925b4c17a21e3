"""`bloom mcp`: the fleet as tools in a Claude session (the Model Context Protocol, on stdio)."""

import asyncio
import contextlib

from bloom.cli.remote import DEFAULT_URL, UrlOption, api_key


def mcp(url: UrlOption = DEFAULT_URL) -> None:
    """Serve the fleet's tools to a Claude session over MCP (stdio): claude mcp add bloom --
    bloom mcp

    The Model Context Protocol on standard input and output, for Claude Code and other MCP
    clients. Its tools queue tasks on the runtime, wait for them with their live output as
    progress, and read results, workers and the queue. The key comes from BLOOM_API_KEY (or
    RUNTIME_API_KEY); a viewer key gets the read tools only. See docs/mcp.md."""
    from bloom.mcp.server import serve_stdio

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_stdio(url, api_key()))
