"""The agent CLIs this worker knows, each an adapter carrying the worker's settings for it."""

import os

from bloom.worker.agents.base import AgentCli
from bloom.worker.agents.claude.adapter import ClaudeCli
from bloom.worker.agents.codex import config as codex_config
from bloom.worker.agents.codex.adapter import CodexCli
from bloom.worker.agents.gemini.adapter import GeminiCli
from bloom.worker.settings import WorkerSettings

ADAPTERS: dict[str, type[AgentCli]] = {
    ClaudeCli.name: ClaudeCli,
    CodexCli.name: CodexCli,
    GeminiCli.name: GeminiCli,
}
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
        ),
        CodexCli.name: CodexCli(
            binary=settings.codex_bin or "",
            extra_args=tuple(settings.codex_args),
            listed_env=settings.codex_env,
            model=codex_config.setting("model", settings.codex_args, os.environ),
        ),
        GeminiCli.name: GeminiCli(
            binary=settings.gemini_bin or "",
            extra_args=tuple(settings.gemini_args),
            listed_env=settings.gemini_env,
        ),
    }
