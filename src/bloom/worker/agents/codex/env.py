"""What the Codex CLI is given of the worker's environment: an allow-list, nothing else.

It gets what any CLI needs (`PROCESS_NEEDS`), its own variables (`CODEX_HOME`, where its
configuration, login and sessions live, and `CODEX_API_KEY`), OpenAI's (`OPENAI_API_KEY`,
`OPENAI_BASE_URL`, …), and what the operator lists (`BLOOM_CODEX_ENV`, e.g. the variable a
provider's `env_key` names); never the worker's own secrets.
"""

from collections.abc import Iterable, Mapping

from bloom.worker.agents.environment import PROCESS_NEEDS, allowed_environment

CODEX_NEEDS: tuple[str, ...] = (*PROCESS_NEEDS, "CODEX_*", "OPENAI_*", "RUST_LOG")


def child_environment(environ: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """What the Codex CLI is given of `environ`."""
    return allowed_environment(environ, (*CODEX_NEEDS, *listed))
