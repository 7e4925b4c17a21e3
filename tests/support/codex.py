"""The real Codex CLI, pinned, from the project cache (`.ci/run` and `make test` install it),
pointed at the echo model's Responses API as a provider of its own."""

import json
import os
from pathlib import Path

from bloom.worker.agents.codex.install import cached_binary

CODEX_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "codex-cli"
MODEL = "gpt-5.1-codex"
"""A model the price table knows (the echo model answers as any model), so a run has a cost."""


def codex_binary() -> Path | None:
    override = os.environ.get("BLOOM_TEST_CODEX_BIN")
    return Path(override) if override else cached_binary(CODEX_CACHE)


def codex_worker_env(codex: Path, model_url: str) -> dict[str, str]:
    """A worker's settings for running the Codex CLI against the echo model (its own retries
    off, so that a scripted error is reported at once)."""
    provider = {
        "name": "echo",
        "base_url": f"{model_url}/v1",
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    args = ["-c", 'model_provider="echo"', "-c", f'model="{MODEL}"']
    for key, value in provider.items():
        args += ["-c", f"model_providers.echo.{key}={json.dumps(value)}"]
    return {
        "BLOOM_CODEX_BIN": str(codex),
        "BLOOM_CODEX_ARGS": json.dumps(args),
        "OPENAI_API_KEY": "test-model-key",
    }
