"""The real Codex CLI, pinned, from the project cache (`.ci/run` and `make test` install it),
pointed at the echo model's Responses API as a provider of its own (as `bloom up --demo-model`
points it: `bloom.worker.demo`)."""

import os
from pathlib import Path

from bloom.worker.agents.codex.install import LAUNCHER
from bloom.worker.demo import DEMO_CODEX_MODEL, codex_echo_environment

CODEX_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "codex-cli"
MODEL = DEMO_CODEX_MODEL
"""A model the price table knows (the echo model answers as any model), so a run has a cost."""


def codex_binary() -> Path | None:
    override = os.environ.get("BLOOM_TEST_CODEX_BIN")
    return Path(override) if override else LAUNCHER.cached_binary(CODEX_CACHE)


def codex_worker_env(codex: Path, model_url: str) -> dict[str, str]:
    """A worker's settings for running the Codex CLI against the echo model (its own retries
    off, so that a scripted error is reported at once)."""
    return codex_echo_environment(str(codex), model_url)
