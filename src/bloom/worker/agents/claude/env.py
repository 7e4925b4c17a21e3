"""What the Claude CLI is given of the worker's environment: an allow-list, nothing else.

The CLI gets only what it needs to run and to reach its model (`CLAUDE_NEEDS`), a cloud
provider's variables when Claude is switched to that provider (`PROVIDERS`), and what the
operator lists (`BLOOM_CLAUDE_ENV`); never the worker's own secrets (`WORKER_SECRETS`), even when
listed (`bloom.worker.agents.environment`).
"""

from collections.abc import Iterable, Mapping

from bloom.worker.agents.environment import (
    PROCESS_NEEDS,
    SWITCHED_ON,
    allowed_environment,
)

CLAUDE_NEEDS: tuple[str, ...] = (
    *PROCESS_NEEDS,
    # Claude's own credentials and settings
    "ANTHROPIC_*", "CLAUDE_CODE_*", "CLAUDE_CONFIG_DIR",
    # Claude's documented settings without its prefixes
    "API_TIMEOUT_MS", "MAX_THINKING_TOKENS", "MAX_MCP_OUTPUT_TOKENS", "MCP_TIMEOUT",
    "MCP_TOOL_TIMEOUT", "BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "BASH_MAX_OUTPUT_LENGTH",
    "DISABLE_AUTOUPDATER", "DISABLE_BUG_COMMAND", "DISABLE_COST_WARNINGS",
    "DISABLE_ERROR_REPORTING", "DISABLE_NON_ESSENTIAL_MODEL_CALLS", "DISABLE_TELEMETRY",
    "DISABLE_PROMPT_CACHING*", "USE_BUILTIN_RIPGREP",
)  # fmt: skip
PROVIDERS: dict[str, tuple[str, ...]] = {
    "CLAUDE_CODE_USE_BEDROCK": ("AWS_*",),
    "CLAUDE_CODE_USE_VERTEX": ("GOOGLE_*", "GCLOUD_PROJECT", "CLOUD_ML_*", "VERTEX_REGION_*"),
    "CLAUDE_CODE_USE_FOUNDRY": ("AZURE_*",),
}
"""A provider's switch, and what Claude reads to reach it: given only while the switch is on."""


def child_environment(
    environ: Mapping[str, str], agent_slug: str, listed: Iterable[str] = ()
) -> dict[str, str]:
    """What the Claude CLI is given of `environ`: what `CLAUDE_NEEDS`, the switched-on
    providers' and `listed` admit, never `WORKER_SECRETS`; and the seed's `CLAUDE_PROJECT_ID`
    for a named agent slug."""
    providers = [
        pattern
        for switch, patterns in PROVIDERS.items()
        if environ.get(switch, "").strip().lower() in SWITCHED_ON
        for pattern in patterns
    ]
    env = allowed_environment(environ, (*CLAUDE_NEEDS, *providers, *listed))
    if agent_slug != "default":
        env["CLAUDE_PROJECT_ID"] = agent_slug
    return env
