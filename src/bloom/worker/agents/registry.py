"""The agent CLIs this worker knows, each an adapter carrying the worker's settings for it."""

from bloom.worker.agents.base import AgentCli
from bloom.worker.agents.claude.adapter import ClaudeCli
from bloom.worker.settings import WorkerSettings

ADAPTERS: dict[str, type[AgentCli]] = {ClaudeCli.name: ClaudeCli}
"""Every adapter there is, by the `cli` name a task gives."""


def adapters(settings: WorkerSettings) -> dict[str, AgentCli]:
    """The adapters, configured from the worker's settings."""
    project_agents = (settings.project_dir / ".claude" / "agents",) if settings.project_dir else ()
    return {
        ClaudeCli.name: ClaudeCli(
            binary=settings.claude_bin,
            extra_args=tuple(settings.claude_args),
            listed_env=settings.claude_env,
            agent_dirs=project_agents,
        )
    }
