"""What the Claude CLI is given of the worker's environment: an allow-list, nothing else.

A prompt can steer the CLI's tools, so the CLI gets only what it needs to run and to reach its
model (`CLAUDE_NEEDS`), a cloud provider's variables when Claude is switched to that provider
(`PROVIDERS`), and what the operator lists (`BLOOM_CLAUDE_ENV`); never the worker's own secrets
(`WORKER_SECRETS`), even when listed. A pattern is a variable's name, or a prefix ending in `*`.
"""

import re
from collections.abc import Iterable, Mapping

CLAUDE_NEEDS: tuple[str, ...] = (
    # the process: where things are, who runs it
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "XDG_*",
    # locale and terminal
    "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "NO_COLOR",
    # the network: proxies, certificate authorities
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
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
WORKER_SECRETS: tuple[str, ...] = ("BLOOM_*", "MEMBRIDGE_*", "RUNTIME_API_KEY", "DATABASE_URL")
"""The runtime's and Membridge's settings and keys: never given to a child of the worker."""
SWITCHED_ON = frozenset({"1", "true", "yes", "on"})
"""The values Claude takes for a switch that is on."""
PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


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
    allowed = (*CLAUDE_NEEDS, *providers, *listed)
    env = {
        name: value
        for name, value in environ.items()
        if matches(name, allowed) and not matches(name, WORKER_SECRETS)
    }
    if agent_slug != "default":
        env["CLAUDE_PROJECT_ID"] = agent_slug
    return env


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment without the runtime's and Membridge's secrets, for a child."""
    return {name: value for name, value in environ.items() if not matches(name, WORKER_SECRETS)}


def listed_patterns(value: str | Iterable[str]) -> tuple[str, ...]:
    """`BLOOM_CLAUDE_ENV`'s patterns (comma-separated in text); ValueError for one that is no
    name (nor a prefix ending in `*`), or that names the worker's own secrets."""
    names = value.split(",") if isinstance(value, str) else value
    patterns = tuple(name.strip() for name in names if name.strip())
    for pattern in patterns:
        if not PATTERN.fullmatch(pattern):
            raise ValueError(f"{pattern!r} is not a variable name, nor a prefix ending in *")
        if matches(pattern.rstrip("*"), WORKER_SECRETS):
            raise ValueError(f"{pattern} names the worker's own secrets: never given to Claude")
    return patterns


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether a pattern admits `name`: the name itself, or a prefix of it ending in `*`."""
    return any(
        name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern
        for pattern in patterns
    )
