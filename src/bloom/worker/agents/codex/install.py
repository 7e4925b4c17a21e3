"""Finding the Codex CLI, or fetching the pinned version of it into a project-local cache.

The CLI is published on npm as `@openai/codex`: a small Node.js launcher (`bin/codex.js`) and,
as an optional dependency, a native binary per platform (`@openai/codex-linux-x64/vendor/…`),
which the launcher runs in its place (`execve`: signals reach the binary itself). We look for
`BLOOM_CODEX_BIN`, then `codex` on PATH, then the cache (`./.cache/codex-cli`, or
`BLOOM_CODEX_CACHE`), and fetch it there with npm when asked to (`npm.Launcher`).
"""

from pathlib import Path

from bloom.worker.agents.npm import Launcher, Package

PINNED_VERSION = "0.171.0"
PACKAGE = "@openai/codex"
CACHE_ENV = "BLOOM_CODEX_CACHE"
BIN_ENV = "BLOOM_CODEX_BIN"
DEFAULT_CACHE_DIR = Path(".cache/codex-cli")
APPROX_SIZE = "about 420 MB"
NPM_PACKAGE = Package(PACKAGE, "Codex", APPROX_SIZE, BIN_ENV, "codex")
LAUNCHER = Launcher(NPM_PACKAGE, PINNED_VERSION, CACHE_ENV, DEFAULT_CACHE_DIR)


class CodexCliError(RuntimeError):
    """The CLI could not be found or fetched; the message says what to do."""
