"""A worker's settings for the echo model (`bloom up --demo-model`, `bloom bench
--worker-overhead`): its Claude CLI, and its Codex and Gemini CLIs when this machine has them,
pointed at the model, the user's own credentials left out."""

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from bloom.worker.agents.base import AgentCli
from bloom.worker.agents.codex.adapter import CodexCli
from bloom.worker.agents.gemini.adapter import GeminiCli
from bloom.worker.agents.gemini.env import SYSTEM_DEFAULTS

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


def gemini_echo_environment(binary: str, model_url: str, home: Path) -> dict[str, str]:
    """A worker's settings for running the Gemini CLI at `binary` against the echo model (its
    Gemini API at `GOOGLE_GEMINI_BASE_URL`, a made-up key), with `home` as the CLI's own
    (`GEMINI_CLI_HOME`, made here): its user settings are the worker's offline defaults, which
    choose the key's authentication. The CLI reads system defaults only from a root-owned path
    no one else can write to (not for a worker run by another user, nor from a checkout under
    /tmp); its user settings, always."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SYSTEM_DEFAULTS, settings)
    return {
        "BLOOM_GEMINI_BIN": binary,
        "BLOOM_GEMINI_ARGS": json.dumps(["--model", DEMO_GEMINI_MODEL]),
        "GOOGLE_GEMINI_BASE_URL": model_url,
        "GEMINI_API_KEY": DEMO_API_KEY,
        "GEMINI_CLI_HOME": str(home),
    }


EchoEnvironment = Callable[[str, str, Path], dict[str, str]]
"""A CLI's settings for the echo model: from its binary, the model's URL and a directory of its
own."""
ECHO_ENVIRONMENTS: dict[str, tuple[type[AgentCli], EchoEnvironment]] = {
    "codex": (CodexCli, lambda binary, model_url, _home: codex_echo_environment(binary, model_url)),
    "gemini": (GeminiCli, gemini_echo_environment),
}
"""The agent CLIs besides Claude the demo points at the echo model: each one's adapter (to find
it) and its settings for the model."""


def demo_environment(environ: Mapping[str, str], model_url: str) -> dict[str, str]:
    """`environ` for a worker whose Claude CLI talks to the echo model at `model_url`, the
    user's own credentials left out."""
    env = {name: value for name, value in environ.items() if name not in USER_CREDENTIALS}
    return env | {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DEMO_API_KEY,
        "BLOOM_CLAUDE_ARGS": json.dumps(DEMO_CLAUDE_ARGS),
    }


def other_clis_environment(clis: Mapping[str, str], model_url: str, homes: Path) -> dict[str, str]:
    """The settings for each CLI of `clis` (name → binary, `demo_clis`) to talk to the echo
    model, those that need a directory of their own given one under `homes`."""
    env: dict[str, str] = {}
    for name, binary in clis.items():
        env |= ECHO_ENVIRONMENTS[name][1](binary, model_url, homes / f"{name}-home")
    return env


def demo_clis(environ: Mapping[str, str]) -> dict[str, str]:
    """The CLIs besides Claude the demo's worker runs, those this machine has (the operator's
    `BLOOM_<CLI>_BIN`, PATH, or `bloom agents install`'s cache): name → path made absolute (the
    cache's is relative to where `bloom up` runs)."""
    found = {name: adapter.find(environ) for name, (adapter, _) in ECHO_ENVIRONMENTS.items()}
    return {name: str(cli.path.absolute()) for name, cli in found.items() if cli is not None}
