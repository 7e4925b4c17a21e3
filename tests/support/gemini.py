"""The real Gemini CLI, pinned, from the project cache (`.ci/run` and `make test` install it),
pointed at the echo model's Gemini API (`GOOGLE_GEMINI_BASE_URL`, a made-up key), as
`bloom up --demo-model` points it (`bloom.worker.demo`)."""

import os
from pathlib import Path

from bloom.worker.agents.gemini.install import LAUNCHER
from bloom.worker.demo import DEMO_GEMINI_MODEL, gemini_echo_environment

GEMINI_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "gemini-cli"
MODEL = DEMO_GEMINI_MODEL
"""A model the price table knows (the echo model answers as any model), so a run has a cost;
named, so that the CLI does not first ask a small model which model to use."""


def gemini_binary() -> Path | None:
    override = os.environ.get("BLOOM_TEST_GEMINI_BIN")
    return Path(override) if override else LAUNCHER.cached_binary(GEMINI_CACHE)


def gemini_worker_env(gemini: Path, model_url: str, home: Path) -> dict[str, str]:
    """A worker's settings for running the Gemini CLI against the echo model, `home` its own."""
    return gemini_echo_environment(str(gemini), model_url, home)
