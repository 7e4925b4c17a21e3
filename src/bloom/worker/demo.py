"""A worker's settings for the echo model (`bloom up --demo-model`, `bloom bench
--worker-overhead`): its Claude CLI pointed at the model, the user's own credentials left out."""

import json
from collections.abc import Mapping

DEMO_API_KEY = "demo-not-a-secret"
DEMO_REPO = "demo"
"""The managed project `bloom up --demo-model` makes of the repository its echo model serves."""
DEMO_CLAUDE_ARGS = ["--bare"]
USER_CREDENTIALS = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY")


def demo_environment(environ: Mapping[str, str], model_url: str) -> dict[str, str]:
    """`environ` for a worker whose CLI talks to the echo model at `model_url`."""
    env = {name: value for name, value in environ.items() if name not in USER_CREDENTIALS}
    return env | {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DEMO_API_KEY,
        "BLOOM_CLAUDE_ARGS": json.dumps(DEMO_CLAUDE_ARGS),
    }
