"""What the Codex CLI will be run with, read without running it: where its home is, the model
and provider its arguments or `config.toml` name, whether it has credentials."""

import hashlib
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

AUTH_VARIABLES = ("OPENAI_API_KEY", "CODEX_API_KEY")
NO_CREDENTIALS = (
    "The Codex CLI has no credentials: set OPENAI_API_KEY (or CODEX_API_KEY), run `codex login` "
    "as the worker's user, or configure a provider for it (BLOOM_CODEX_ARGS, or config.toml in "
    "CODEX_HOME)"
)


def codex_home(env: Mapping[str, str]) -> Path:
    """CODEX_HOME, else `~/.codex`."""
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".codex"


def _config_file(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        return tomllib.loads((codex_home(env) / "config.toml").read_text())
    except (OSError, ValueError):
        return {}


def _overrides(args: Sequence[str]) -> dict[str, str]:
    """The top-level `-c key=value` (and `-m`, `--model`) the arguments give, values unquoted."""
    found: dict[str, str] = {}
    items = list(args)
    for index, arg in enumerate(items):
        following = items[index + 1] if index + 1 < len(items) else ""
        if arg in ("-c", "--config") and "=" in following:
            key, _, value = following.partition("=")
            found[key.strip()] = value.strip().strip("\"'")
        elif arg.startswith("--config="):
            key, _, value = arg.removeprefix("--config=").partition("=")
            found[key.strip()] = value.strip().strip("\"'")
        elif arg in ("-m", "--model") and following:
            found["model"] = following
        elif arg.startswith("--model="):
            found["model"] = arg.removeprefix("--model=")
    return found


def setting(name: str, args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """A top-level setting: the arguments' override, else `config.toml`'s, else None."""
    given = _overrides(args).get(name)
    if given:
        return given
    value = _config_file(env).get(name)
    return value if isinstance(value, str) and value else None


def credentials_problem(args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """None when the CLI has credentials (a key in its environment, a login in its home, or a
    provider of the operator's, whose key is the provider's business); else why not."""
    if any(env.get(name, "").strip() for name in AUTH_VARIABLES):
        return None
    if (codex_home(env) / "auth.json").is_file():
        return None
    provider = setting("model_provider", args, env)
    if provider and provider != "openai":
        return None
    return NO_CREDENTIALS


def fingerprint(args: Sequence[str], env: Mapping[str, str]) -> str:
    """A digest of where the CLI finds its credentials: it changes when they do."""
    home = codex_home(env)
    parts = [f"{name}={env.get(name, '')}" for name in AUTH_VARIABLES]
    parts += [f"CODEX_HOME={home}", f"provider={setting('model_provider', args, env)}"]
    for name in ("auth.json", "config.toml"):
        try:
            stat = (home / name).stat()
            parts.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append(f"{name}:-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
