"""What the Gemini CLI will be run with, read without running it: where its home is, whether
it has credentials."""

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bloom.worker.agents.environment import SWITCHED_ON

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
VERTEX = ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")
LOGIN_FILE = "oauth_creds.json"
NO_CREDENTIALS = (
    "The Gemini CLI has no credentials: set GEMINI_API_KEY (or GOOGLE_API_KEY, or "
    "GOOGLE_GENAI_USE_VERTEXAI with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION), or log the "
    "worker's user in with `gemini` (its ~/.gemini/oauth_creds.json)"
)


def gemini_home(env: Mapping[str, str]) -> Path:
    """Where the CLI keeps its settings, login and sessions: `GEMINI_CLI_HOME`, else HOME, and
    `.gemini` in it."""
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME") or str(Path.home())
    return Path(home).expanduser() / ".gemini"


def _selected_auth(env: Mapping[str, str]) -> str | None:
    """The authentication the user's settings select, if any."""
    try:
        settings: Any = json.loads((gemini_home(env) / "settings.json").read_text())
    except (OSError, ValueError):
        return None
    auth = settings.get("security", {}).get("auth", {}) if isinstance(settings, dict) else {}
    selected = auth.get("selectedType") if isinstance(auth, dict) else None
    return selected if isinstance(selected, str) and selected else None


def credentials_problem(env: Mapping[str, str]) -> str | None:
    """None when the CLI has credentials (a key, Vertex AI's project and location, or a Google
    login in its home); else why not."""
    if any(env.get(name, "").strip() for name in KEY_VARIABLES):
        return None
    vertex = env.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower() in SWITCHED_ON
    if vertex and all(env.get(name, "").strip() for name in VERTEX):
        return None
    if (gemini_home(env) / LOGIN_FILE).is_file():
        return None
    return NO_CREDENTIALS


def fingerprint(env: Mapping[str, str]) -> str:
    """A digest of where the CLI finds its credentials: it changes when they do."""
    home = gemini_home(env)
    parts = [f"{name}={env.get(name, '')}" for name in (*KEY_VARIABLES, *VERTEX)]
    parts += [f"home={home}", f"selected={_selected_auth(env)}"]
    for name in (LOGIN_FILE, "settings.json"):
        try:
            stat = (home / name).stat()
            parts.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append(f"{name}:-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
