"""Finding the Gemini CLI, or fetching the pinned version of it into a project-local cache.

The CLI is published on npm as `@google/gemini-cli`: one bundled Node.js program
(`bundle/gemini.js`, about 100 MB installed), run by Node.js itself (20 or newer), which may
start itself again as a child with more memory. We look for `BLOOM_GEMINI_BIN`, then `gemini`
on PATH, then the cache (`./.cache/gemini-cli`, or `BLOOM_GEMINI_CACHE`), and fetch it there
with npm when asked to (`npm.Launcher`).
"""

from pathlib import Path

from bloom.worker.agents.npm import Launcher, Package

PINNED_VERSION = "0.61.0"
PACKAGE = "@google/gemini-cli"
CACHE_ENV = "BLOOM_GEMINI_CACHE"
BIN_ENV = "BLOOM_GEMINI_BIN"
DEFAULT_CACHE_DIR = Path(".cache/gemini-cli")
APPROX_SIZE = "about 100 MB"
NPM_PACKAGE = Package(PACKAGE, "Gemini", APPROX_SIZE, BIN_ENV, "gemini")
LAUNCHER = Launcher(NPM_PACKAGE, PINNED_VERSION, CACHE_ENV, DEFAULT_CACHE_DIR)


class GeminiCliError(RuntimeError):
    """The CLI could not be found or fetched; the message says what to do."""
