"""A worker's settings for the echo model (`bloom up --demo-model`, `bloom bench
--worker-overhead`): its Claude CLI, and its Codex and Gemini CLIs when this machine has them,
pointed at the model, the user's own credentials left out."""

import json
from collections.abc import Callable, Mapping

from bloom.worker.agents.base import AgentCli
from bloom.worker.agents.codex.adapter import CodexCli
from bloom.worker.agents.gemini.adapter import GeminiCli

DEMO_API_KEY = "demo-not-a-secret"
DEMO_REPO = "demo"
"""The managed project `bloom up --demo-model` makes of the repository its echo model serves."""
DEMO_CLAUDE_ARGS = ["--bare"]
DEMO_CODEX_MODEL = "gpt-5.1-codex"
"""The model Codex asks the echo model for (it answers as any): one the price table knows, so a
run has a cost."""
DEMO_GEMINI_MODEL = "gemini-2.5-flash"
"""The same for Gemini; named, so that the CLI does not first ask a small model which to use."""
USER_CREDENTIALS = (
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_GCA",
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


def gemini_echo_environment(binary: str, model_url: str) -> dict[str, str]:
    """A worker's settings for running the Gemini CLI at `binary` against the echo model (its
    Gemini API at `GOOGLE_GEMINI_BASE_URL`, a made-up key)."""
    return {
        "BLOOM_GEMINI_BIN": binary,
        "BLOOM_GEMINI_ARGS": json.dumps(["--model", DEMO_GEMINI_MODEL]),
        "GOOGLE_GEMINI_BASE_URL": model_url,
        "GEMINI_API_KEY": DEMO_API_KEY,
    }


ECHO_ENVIRONMENTS: dict[str, tuple[type[AgentCli], Callable[[str, str], dict[str, str]]]] = {
    "codex": (CodexCli, codex_echo_environment),
    "gemini": (GeminiCli, gemini_echo_environment),
}
"""The agent CLIs besides Claude the demo points at the echo model: each one's adapter (to find
it) and its settings for the model."""


def demo_environment(
    environ: Mapping[str, str], model_url: str, clis: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`environ` for a worker whose CLIs talk to the echo model at `model_url`: Claude always,
    and each other CLI of `clis` (name → binary, `demo_clis`)."""
    env = {name: value for name, value in environ.items() if name not in USER_CREDENTIALS}
    env |= {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DEMO_API_KEY,
        "BLOOM_CLAUDE_ARGS": json.dumps(DEMO_CLAUDE_ARGS),
    }
    for name, binary in (clis or {}).items():
        env |= ECHO_ENVIRONMENTS[name][1](binary, model_url)
    return env


def demo_clis(environ: Mapping[str, str]) -> dict[str, str]:
    """The CLIs besides Claude the demo's worker runs, those this machine has (the operator's
    `BLOOM_<CLI>_BIN`, PATH, or `bloom agents install`'s cache): name → path made absolute (the
    cache's is relative to where `bloom up` runs)."""
    found = {name: adapter.find(environ) for name, (adapter, _) in ECHO_ENVIRONMENTS.items()}
    return {name: str(cli.path.absolute()) for name, cli in found.items() if cli is not None}
