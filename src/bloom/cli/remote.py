"""What the commands that talk to a running runtime share: its URL, the API key, one event loop
per command, clean errors, and a few formats for people."""

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from bloom.cli.output import fail

if TYPE_CHECKING:  # the client (httpx) when a command calls the runtime, rich when it prints
    from rich.console import Console

    from bloom.clients.runtime import RuntimeApiError, RuntimeClient

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:5000"

UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="BLOOM_RUNTIME_URL",
        help="The runtime. Its API key, if it has one, comes from "
        "BLOOM_API_KEY or RUNTIME_API_KEY.",
        show_default=True,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead.")]


def api_key() -> str:
    """The runtime's API key from the environment (never an option: it would show in `ps`)."""
    return os.environ.get("BLOOM_API_KEY") or os.environ.get("RUNTIME_API_KEY") or ""


def call(url: str, action: "Callable[[RuntimeClient], Awaitable[T]]") -> T:
    """Run `action` with a client of the runtime at `url`; its errors as one line each:
    unreachable, 401 and a URL that is Membridge's exit 2 (fix the setup), other refusals exit
    1. Ctrl-C passes through."""
    from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable

    async def main() -> T:
        async with RuntimeClient(url, api_key()) as client:
            return await action(client)

    try:
        return asyncio.run(main())
    except RuntimeUnreachable as exc:
        fail(f"cannot reach the runtime at {url} ({exc}); is it running? (`bloom up`)", 2)
    except RuntimeApiError as exc:
        if exc.status in (401, 404) and is_membridge(url):
            fail(
                f"{url} answers as Membridge, not as the runtime: give the runtime's URL "
                f"(--url or BLOOM_RUNTIME_URL; {DEFAULT_URL} by default)",
                2,
            )
        fail(api_error(exc), 2 if exc.status == 401 else 1)


def is_membridge(url: str) -> bool:
    """Whether `url` is Membridge's: its `/health` names Membridge's service."""
    import httpx

    from bloom.membridge import SERVICE_NAME

    try:
        health = httpx.get(f"{url.split(',')[0].strip().rstrip('/')}/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(health, dict) and health.get("service") == SERVICE_NAME


def api_error(exc: "RuntimeApiError") -> str:
    from bloom.clients.runtime import RuntimeContractError

    if isinstance(exc, RuntimeContractError):
        return f"the runtime's answer does not fit this bloom (another version?): {exc.message}"
    if exc.status == 401:
        return "the runtime wants an API key (401): set BLOOM_API_KEY (or RUNTIME_API_KEY) to it"
    if exc.status == 404:
        return f"not found: {exc.message}"
    if exc.status == 409:
        return f"refused (409): {exc.message}"
    return f"the runtime answered {exc.status}: {exc.message}"


PIPE_WIDTH = 200


def out() -> "Console":
    """stdout for people; piped (and no COLUMNS set), tables keep their full width."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def err() -> "Console":
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def ago(epoch_ms: int | None, now_ms: int | None = None) -> str:
    """`12s ago`, `5m ago`, `3h ago`, `2d ago`; `in 40s` for the future; `-` for nothing."""
    if not epoch_ms:
        return "-"
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    seconds = (now - epoch_ms) / 1000
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{seconds:.0f}s"
    elif seconds < 3600:
        text = f"{seconds / 60:.0f}m"
    elif seconds < 86_400:
        text = f"{seconds / 3600:.0f}h"
    else:
        text = f"{seconds / 86_400:.0f}d"
    return f"in {text}" if future else f"{text} ago"


def when(epoch_ms: int | None) -> str:
    """Local time, `2025-01-31 14:02:09`, or `-`."""
    if not epoch_ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_ms / 1000))


STATUS_STYLE = {
    "queued": "blue",
    "leased": "cyan",
    "running": "cyan bold",
    "completed": "green",
    "failed": "red",
    "dead": "red bold",
    "cancelled": "yellow",
    "online": "green",
    "offline": "dim",
    "error": "red",
}


def styled_status(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status
