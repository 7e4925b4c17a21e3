"""What the Gemini CLI is given of the worker's environment: an allow-list, nothing else; and
the settings that keep it to the model it is pointed at.

It gets what any CLI needs (`PROCESS_NEEDS`), its own variables (`GEMINI_*`: its key, its model,
`GEMINI_CLI_HOME` where its settings and sessions live), the Gemini API's endpoint
(`GOOGLE_GEMINI_BASE_URL`), Google's key and its switches to Vertex AI or a Google login
(`GOOGLE_API_KEY`, `GOOGLE_GENAI_*`, `GOOGLE_CLOUD_PROJECT`, `GOOGLE_CLOUD_LOCATION`,
`GOOGLE_APPLICATION_CREDENTIALS`), and what the operator lists (`BLOOM_GEMINI_ENV`); never the
worker's own secrets.

Its system defaults (`GEMINI_CLI_SYSTEM_DEFAULTS_PATH`, the lowest of its settings: the user's
own `settings.json` overrides them) are `system-defaults.json` beside this module, unless the
operator names other ones: no usage statistics, telemetry, update check or IDE connection, so
that it calls nothing but its model. The CLI takes them only when the file and every directory above
it are owned by root and writable by no one else (it warns on stderr and skips them
otherwise): a worker run by another user needs them in its own user settings (docs/agents.md).

With `GOOGLE_GEMINI_BASE_URL` and `GEMINI_API_KEY`, 0.61.0 picks an authentication of its own
("gateway") that its headless mode then rejects ("Invalid auth method selected."): the key's
authentication is chosen for it then (`GEMINI_CLI_BLOOM_AUTH_TYPE`, which the defaults read).
"""

from collections.abc import Iterable, Mapping
from pathlib import Path

from bloom.worker.agents.environment import PROCESS_NEEDS, SWITCHED_ON, allowed_environment

GEMINI_NEEDS: tuple[str, ...] = (
    *PROCESS_NEEDS,
    "GEMINI_*",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_*",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_PROJECT_ID",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_APPLICATION_CREDENTIALS",
)
SYSTEM_DEFAULTS = Path(__file__).with_name("system-defaults.json")
DEFAULTS_ENV = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"
AUTH_TYPE_ENV = "GEMINI_CLI_BLOOM_AUTH_TYPE"
API_KEY_AUTH = "gemini-api-key"
SWITCHES = ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA")
"""The variables that choose another authentication than the Gemini API's key."""


def auth_type(env: Mapping[str, str]) -> str | None:
    """The authentication to choose for the CLI: the key's when it is to reach the Gemini API
    at another address (`GOOGLE_GEMINI_BASE_URL`) with it, else None (the CLI's own choice)."""
    if any(env.get(name, "").strip().lower() in SWITCHED_ON for name in SWITCHES):
        return None
    if env.get("GOOGLE_GEMINI_BASE_URL") and env.get("GEMINI_API_KEY"):
        return API_KEY_AUTH
    return None


def child_environment(environ: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """What the Gemini CLI is given of `environ`, with its offline defaults."""
    env = allowed_environment(environ, (*GEMINI_NEEDS, *listed))
    env.setdefault(DEFAULTS_ENV, str(SYSTEM_DEFAULTS))
    chosen = auth_type(env)
    if chosen and not env.get(AUTH_TYPE_ENV):
        env[AUTH_TYPE_ENV] = chosen
    return env
