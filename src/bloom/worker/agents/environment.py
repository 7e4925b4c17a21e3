"""What an agent CLI is given of the worker's environment: an allow-list, nothing else (shared).

A prompt can steer the CLI's tools, so a CLI gets only what its adapter says it needs, and what
the operator lists for it; never the worker's own secrets (`WORKER_SECRETS`), even when listed.
A pattern is a variable's name, or a prefix ending in `*`.
"""

import re
from collections.abc import Iterable, Mapping

PROCESS_NEEDS: tuple[str, ...] = (
    # the process: where things are, who runs it
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "XDG_*",
    # locale and terminal
    "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "NO_COLOR",
    # the network: proxies, certificate authorities
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
)  # fmt: skip
"""What any CLI needs to run and to reach the network."""
WORKER_SECRETS: tuple[str, ...] = ("BLOOM_*", "MEMBRIDGE_*", "RUNTIME_API_KEY", "DATABASE_URL")
"""The runtime's and Membridge's settings and keys: never given to a child of the worker."""
SWITCHED_ON = frozenset({"1", "true", "yes", "on"})
"""The values the CLIs take for a switch that is on."""
PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def allowed_environment(environ: Mapping[str, str], allowed: Iterable[str]) -> dict[str, str]:
    """What of `environ` the `allowed` patterns admit, never `WORKER_SECRETS`."""
    patterns = tuple(allowed)
    return {
        name: value
        for name, value in environ.items()
        if matches(name, patterns) and not matches(name, WORKER_SECRETS)
    }


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment without the runtime's and Membridge's secrets, for a child."""
    return {name: value for name, value in environ.items() if not matches(name, WORKER_SECRETS)}


def listed_patterns(value: str | Iterable[str]) -> tuple[str, ...]:
    """An operator's list of patterns (comma-separated in text, as `BLOOM_CLAUDE_ENV`);
    ValueError for one that is no name (nor a prefix ending in `*`), or that names the worker's
    own secrets."""
    names = value.split(",") if isinstance(value, str) else value
    patterns = tuple(name.strip() for name in names if name.strip())
    for pattern in patterns:
        if not PATTERN.fullmatch(pattern):
            raise ValueError(f"{pattern!r} is not a variable name, nor a prefix ending in *")
        if matches(pattern.rstrip("*"), WORKER_SECRETS):
            raise ValueError(
                f"{pattern} names the worker's own secrets: never given to an agent CLI"
            )
    return patterns


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether a pattern admits `name`: the name itself, or a prefix of it ending in `*`."""
    return any(
        name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern
        for pattern in patterns
    )
