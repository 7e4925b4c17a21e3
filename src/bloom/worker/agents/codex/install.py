"""Finding the Codex CLI, or fetching the pinned version of it into a project-local cache.

The CLI is published on npm as `@openai/codex`: a small Node.js launcher (`bin/codex.js`) and,
as an optional dependency, a native binary per platform (`@openai/codex-linux-x64/vendor/…`),
which the launcher runs in its place (`execve`: signals reach the binary itself). We look for
`BLOOM_CODEX_BIN`, then `codex` on PATH, then the cache (`./.cache/codex-cli`, or
`BLOOM_CODEX_CACHE`), and fetch it there with npm when asked to.
"""

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from bloom.worker.agents.npm import Package
from bloom.worker.agents.npm import install as npm_install
from bloom.worker.agents.npm import installed_version as npm_version

PINNED_VERSION = "0.171.0"
PACKAGE = "@openai/codex"
CACHE_ENV = "BLOOM_CODEX_CACHE"
BIN_ENV = "BLOOM_CODEX_BIN"
DEFAULT_CACHE_DIR = Path(".cache/codex-cli")
APPROX_SIZE = "about 420 MB"
NPM_PACKAGE = Package(PACKAGE, "Codex", APPROX_SIZE, BIN_ENV, "codex")


class CodexCliError(RuntimeError):
    """The CLI could not be found or fetched; the message says what to do."""


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the fetched CLI lives: `BLOOM_CODEX_CACHE`, or `./.cache/codex-cli`."""
    env = os.environ if environ is None else environ
    return Path(env.get(CACHE_ENV) or DEFAULT_CACHE_DIR)


def installed_version(cache: Path) -> str | None:
    """The version of the package installed in `cache`, or None."""
    return npm_version(cache, PACKAGE)


def cached_binary(cache: Path, version: str = PINNED_VERSION) -> Path | None:
    """The CLI's launcher in `cache` when the pinned version is installed there, else None."""
    if installed_version(cache) != version:
        return None
    launcher = cache / "node_modules" / ".bin" / "codex"
    if launcher.is_file() and os.access(launcher, os.X_OK):
        return launcher.absolute()
    return None


def configured(environ: Mapping[str, str] | None = None) -> str | None:
    """What `BLOOM_CODEX_BIN` names, when set: the operator's choice wins."""
    env = os.environ if environ is None else environ
    return env.get(BIN_ENV) or None


def find_codex(environ: Mapping[str, str] | None = None) -> tuple[Path, str] | None:
    """The CLI to run and how it was found ("configured", "path", "cache"), or None."""
    env = os.environ if environ is None else environ
    chosen = configured(env)
    if chosen:
        path = shutil.which(chosen, path=env.get("PATH"))
        return (Path(path), "configured") if path else None
    on_path = shutil.which("codex", path=env.get("PATH"))
    if on_path:
        return Path(on_path), "path"
    cached = cached_binary(cache_dir(env))
    return (cached, "cache") if cached else None


def install_codex(
    cache: Path,
    echo: Callable[[str], None],
    *,
    version: str = PINNED_VERSION,
    npm: str | None = None,
) -> Path:
    """Fetch the CLI into `cache` with npm (its output goes to our stderr); its binary's path."""
    return npm_install(
        NPM_PACKAGE, cache, version, echo, located=cached_binary, failure=CodexCliError, npm=npm
    )
