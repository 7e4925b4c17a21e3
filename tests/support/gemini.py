"""The real Gemini CLI, pinned, from the project cache (`.ci/run` and `make test` install it),
pointed at the echo model's Gemini API (`GOOGLE_GEMINI_BASE_URL`, a made-up key)."""

import json
import os
from pathlib import Path

from bloom.worker.agents.gemini.install import LAUNCHER

GEMINI_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "gemini-cli"
MODEL = "gemini-2.5-flash"
"""A model the price table knows (the echo model answers as any model), so a run has a cost;
named, so that the CLI does not first ask a small model which model to use."""


def gemini_binary() -> Path | None:
    override = os.environ.get("BLOOM_TEST_GEMINI_BIN")
    return Path(override) if override else LAUNCHER.cached_binary(GEMINI_CACHE)


def gemini_worker_env(gemini: Path, model_url: str) -> dict[str, str]:
    """A worker's settings for running the Gemini CLI against the echo model."""
    return {
        "BLOOM_GEMINI_BIN": str(gemini),
        "BLOOM_GEMINI_ARGS": json.dumps(["--model", MODEL]),
        "GOOGLE_GEMINI_BASE_URL": model_url,
        "GEMINI_API_KEY": "test-model-key",
    }
