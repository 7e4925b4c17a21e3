"""A worker's settings for the echo model (`bloom up --demo-model`, `bloom bench
--worker-overhead`): its Claude CLI, and its Codex CLI when this machine has one, pointed at the
model, the user's own credentials left out."""

import json
from collections.abc import Mapping

from bloom.worker.agents.codex.adapter import CodexCli

DEMO_API_KEY = "demo-not-a-secret"
DEMO_REPO = "demo"
"""The managed project `bloom up --demo-model` makes of the repository its echo model serves."""
DEMO_CLAUDE_ARGS = ["--bare"]
DEMO_CODEX_MODEL = "gpt-5.1-codex"
"""The model Codex asks the echo model for (it answers as any): one the price table knows, so a
run has a cost."""
USER_CREDENTIALS = (
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
)


def codex_echo_args(model_url: str) -> list[str]:
    """`BLOOM_CODEX_ARGS` for the Codex CLI to call the echo model at `model_url`: a provider
    of its own (the Responses API, its key in `OPENAI_API_KEY`), its retries off so that a
    scripted error is reported at once."""
    provider = {
        "name": "echo",
        "base_url": f"{model_url}/v1",
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    args = ["-c", 'model_provider="echo"', "-c", f'model="{DEMO_CODEX_MODEL}"']
    for key, value in provider.items():
        args += ["-c", f"model_providers.echo.{key}={json.dumps(value)}"]
    return args


def codex_echo_environment(binary: str, model_url: str) -> dict[str, str]:
    """A worker's settings for running the Codex CLI at `binary` against the echo model."""
    return {
        "BLOOM_CODEX_BIN": binary,
        "BLOOM_CODEX_ARGS": json.dumps(codex_echo_args(model_url)),
        "OPENAI_API_KEY": DEMO_API_KEY,
    }


def demo_environment(
    environ: Mapping[str, str], model_url: str, codex: str | None = None
) -> dict[str, str]:
    """`environ` for a worker whose CLIs talk to the echo model at `model_url`: Claude always,
    and the Codex CLI at `codex` when given (`demo_codex`)."""
    env = {name: value for name, value in environ.items() if name not in USER_CREDENTIALS}
    env |= {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DEMO_API_KEY,
        "BLOOM_CLAUDE_ARGS": json.dumps(DEMO_CLAUDE_ARGS),
    }
    return env | codex_echo_environment(codex, model_url) if codex else env


def demo_codex(environ: Mapping[str, str]) -> str | None:
    """The Codex CLI the demo's worker runs, if this machine has one (`BLOOM_CODEX_BIN`, PATH,
    or `bloom agents install codex`'s cache): its path made absolute (the cache's is relative to
    where `bloom up` runs)."""
    found = CodexCli.find(environ)
    return str(found.path.absolute()) if found is not None else None
