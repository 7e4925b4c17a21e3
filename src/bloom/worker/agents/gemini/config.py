"""What the Gemini CLI will be run with, read without running it: where its home is, whether
it has credentials."""

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bloom.worker.agents.environment import SWITCHED_ON

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
VERTEX = ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")
LOGIN_FILE = "oauth_creds.json"
SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}")
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


def project_hash(cwd: Path) -> str:
    """How the CLI names the project a directory is (its sessions are kept per project)."""
    return hashlib.sha256(str(cwd.resolve()).encode()).hexdigest()


def session_file(env: Mapping[str, str], session_id: str) -> tuple[Path, str] | None:
    """Where the CLI keeps the session `session_id` (`tmp/<project>/chats/session-<time>-<id's
    first 8>.jsonl` in its home, its first line naming it) and the hash of its project; None
    when it is not there."""
    if not SESSION_ID.fullmatch(session_id):
        return None
    pattern = f"tmp/*/chats/session-*-{session_id[:8]}.jsonl"
    for path in sorted(gemini_home(env).glob(pattern)):
        try:
            with path.open() as lines:
                head: Any = json.loads(lines.readline())
        except (OSError, ValueError):
            continue
        if isinstance(head, dict) and head.get("sessionId") == session_id:
            return path, str(head.get("projectHash") or "")
    return None
