"""Finding the Claude CLI, or fetching the pinned version of it into a project-local cache.

The CLI is published on npm as `@anthropic-ai/claude-code`; since 2.x the package carries a
native binary per platform (`@anthropic-ai/claude-code-linux-x64/claude` and the like). We look
for `claude` on PATH first, then in the cache (`./.cache/claude-cli`, or `BLOOM_CLAUDE_CACHE`),
and fetch it there with npm when asked to.
"""

import os
import platform
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from bloom.worker.agents.npm import Package
from bloom.worker.agents.npm import install as npm_install
from bloom.worker.agents.npm import installed_version as npm_version

PINNED_VERSION = "2.1.330"
PACKAGE = "@anthropic-ai/claude-code"
CACHE_ENV = "BLOOM_CLAUDE_CACHE"
BIN_ENV = ("BLOOM_CLAUDE_BIN", "CLAUDE_BIN")
DEFAULT_CACHE_DIR = Path(".cache/claude-cli")
APPROX_SIZE = "about 380 MB"
NPM_PACKAGE = Package(PACKAGE, "Claude", APPROX_SIZE, "BLOOM_CLAUDE_BIN", "claude")

_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_OS = {"linux": "linux", "darwin": "darwin"}


class ClaudeCliError(RuntimeError):
    """The CLI could not be found or fetched; the message says what to do."""


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the fetched CLI lives: `BLOOM_CLAUDE_CACHE`, or `./.cache/claude-cli`."""
    env = os.environ if environ is None else environ
    return Path(env.get(CACHE_ENV) or DEFAULT_CACHE_DIR)


def platform_suffix() -> str | None:
    """`linux-x64`, `linux-arm64`, `darwin-arm64`…: the platform package's suffix, or None."""
    os_name = next((name for prefix, name in _OS.items() if sys.platform.startswith(prefix)), None)
    arch = _ARCH.get(platform.machine().lower())
    return f"{os_name}-{arch}" if os_name and arch else None


def installed_version(cache: Path) -> str | None:
    """The version of the package installed in `cache`, or None."""
    return npm_version(cache, PACKAGE)


def cached_binary(cache: Path, version: str = PINNED_VERSION) -> Path | None:
    """The CLI in `cache` when the pinned version is installed there, else None."""
    if installed_version(cache) != version:
        return None
    modules = cache / "node_modules" / "@anthropic-ai"
    candidates = []
    suffix = platform_suffix()
    if suffix:
        candidates.append(modules / f"claude-code-{suffix}" / "claude")
    candidates += [
        modules / "claude-code" / "bin" / "claude.exe",
        cache / "node_modules/.bin/claude",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
    return None


def find_claude(cache: Path | None = None) -> Path | None:
    """`claude` on PATH, else the pinned version in the cache, else None."""
    on_path = shutil.which("claude")
    if on_path:
        return Path(on_path)
    return cached_binary(cache if cache is not None else cache_dir())


def configured_claude(environ: Mapping[str, str] | None = None) -> str | None:
    """What `BLOOM_CLAUDE_BIN` (or `CLAUDE_BIN`) names, when set: the user's choice wins."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in BIN_ENV if env.get(name)), None)


def install_claude(
    cache: Path,
    echo: Callable[[str], None],
    *,
    version: str = PINNED_VERSION,
    npm: str | None = None,
) -> Path:
    """Fetch the CLI into `cache` with npm (its output goes to our stderr); its binary's path."""
    return npm_install(
        NPM_PACKAGE, cache, version, echo, located=cached_binary, failure=ClaudeCliError, npm=npm
    )


def ensure_claude(
    echo: Callable[[str], None], environ: Mapping[str, str] | None = None
) -> tuple[str, bool]:
    """The CLI to run: `BLOOM_CLAUDE_BIN` when set, else found, else fetched. Also says whether
    it was fetched just now."""
    chosen = configured_claude(environ)
    if chosen:
        if shutil.which(chosen) is None:
            raise ClaudeCliError(f"BLOOM_CLAUDE_BIN={chosen} is not an executable file")
        return chosen, False
    cache = cache_dir(environ)
    found = find_claude(cache)
    if found is not None:
        return str(found), False
    return str(install_claude(cache, echo)), True
