"""Whether the Claude CLI has credentials, found without calling a model, and what to do when
it has none.

The CLI is logged in when its environment (as the worker gives it: `child_environment`) holds
a key, a token or a cloud provider's switch, when its settings name an `apiKeyHelper`, when it
keeps a login's credentials file (`.credentials.json` in CLAUDE_CONFIG_DIR, else `~/.claude`),
or, when none of these is found, when `claude auth status` says so (a login kept elsewhere, such
as macOS's keychain). `missing_credentials` decides from those facts; `probe` gathers them.
"""

import hashlib
import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bloom.worker.agents.claude.env import PROVIDERS
from bloom.worker.agents.environment import SWITCHED_ON

AUTH_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
ADVICE = (
    "set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN, or a provider's "
    "CLAUDE_CODE_USE_BEDROCK/VERTEX/FOUNDRY), log in by running `claude` as the worker's user, "
    "or try `make demo` (an echo model, no key needed)"
)
NO_CREDENTIALS = f"The Claude CLI has no credentials: {ADVICE}"
AUTH_FAILURE = re.compile(
    r"not logged in|please run /login|invalid api key|authentication_error"
    r"|\b401\b.*(?:auth|unauthori[sz]ed)|oauth token has expired",
    re.IGNORECASE,
)
"""What the CLI says when its credentials are missing or refused."""
LOGIN_HINT = re.compile(r"\s*·?\s*please run /login\.?", re.IGNORECASE)
STATUS_TIMEOUT_SEC = 15.0


@dataclass(frozen=True, slots=True)
class CredentialFacts:
    """What the worker found of the CLI's credentials."""

    env: Mapping[str, str]
    """The CLI's environment."""
    login_file: bool = False
    """A credentials file the CLI keeps for a login exists."""
    api_key_helper: bool = False
    """The CLI's user settings name an `apiKeyHelper`."""
    cli_logged_in: bool | None = None
    """`claude auth status`'s verdict; None when it was not asked or did not answer."""


def found_without_cli(facts: CredentialFacts) -> bool:
    """Whether the environment, settings or a login file give the CLI credentials."""
    env = facts.env
    return (
        any(env.get(name, "").strip() for name in AUTH_VARIABLES)
        or any(env.get(switch, "").strip().lower() in SWITCHED_ON for switch in PROVIDERS)
        or facts.login_file
        or facts.api_key_helper
    )


def missing_credentials(facts: CredentialFacts) -> str | None:
    """None when the CLI has credentials; else why not and what to do."""
    return None if found_without_cli(facts) or facts.cli_logged_in else NO_CREDENTIALS


def is_auth_failure(text: str) -> bool:
    """Whether the CLI's error says its credentials are missing or refused."""
    return AUTH_FAILURE.search(text) is not None


def auth_failure_message(text: str) -> str:
    """A run's authentication failure as an error message with the advice (the CLI's "Please
    run /login" left out: it is the CLI's own command, not a page of ours)."""
    said = LOGIN_HINT.sub("", text).strip(" ·.") or "authentication failed"
    return f"The Claude CLI could not authenticate ({said}): {ADVICE}"


def config_dir(env: Mapping[str, str]) -> Path:
    """Where the CLI keeps its settings and login: CLAUDE_CONFIG_DIR, else `~/.claude`."""
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".claude"


def _has_api_key_helper(settings_file: Path) -> bool:
    try:
        settings = json.loads(settings_file.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and bool(settings.get("apiKeyHelper"))


def _cli_logged_in(claude_bin: str, env: Mapping[str, str]) -> bool | None:
    """`claude auth status --json`'s `loggedIn` (no model is called); None without an answer."""
    try:
        done = subprocess.run(  # noqa: S603 - our fixed argv, no shell
            [claude_bin, "auth", "status", "--json"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=STATUS_TIMEOUT_SEC,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        status = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    logged_in = status.get("loggedIn") if isinstance(status, dict) else None
    return logged_in if isinstance(logged_in, bool) else None


def fingerprint(env: Mapping[str, str]) -> str:
    """A digest of where the CLI finds its credentials (the environment's keys, tokens and
    provider switches, the login file and the settings as last changed): it changes when the
    credentials do. Only a digest is kept, never a secret."""
    directory = config_dir(env)
    parts = [f"{name}={env.get(name, '')}" for name in (*AUTH_VARIABLES, *PROVIDERS)]
    parts.append(f"CLAUDE_CONFIG_DIR={directory}")
    for name in (".credentials.json", "settings.json"):
        try:
            stat = (directory / name).stat()
            parts.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append(f"{name}:-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def probe(claude_bin: str, env: Mapping[str, str]) -> str | None:
    """`missing_credentials` for the CLI at `claude_bin` run with `env` (blocking: it may run
    `claude auth status`, only when nothing else is found)."""
    directory = config_dir(env)
    facts = CredentialFacts(
        env=env,
        login_file=(directory / ".credentials.json").is_file(),
        api_key_helper=_has_api_key_helper(directory / "settings.json"),
    )
    if not found_without_cli(facts):
        facts = replace(facts, cli_logged_in=_cli_logged_in(claude_bin, env))
    return missing_credentials(facts)
