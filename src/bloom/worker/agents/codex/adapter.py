"""The Codex CLI as an `AgentCli`: `codex exec --json`, the prompt on stdin, `resume <thread>`
for a context's session, its sandbox for the task's permission mode; what it cannot do (tool
rules, ask rules, a turn limit) is refused (docs/agents.md)."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agents.base import (
    Command,
    Launch,
    RunSpec,
    StreamParser,
)
from bloom.worker.agents.codex import config, stream
from bloom.worker.agents.codex import install as cli_install
from bloom.worker.agents.codex import outcome as codex_outcome
from bloom.worker.agents.codex.env import child_environment
from bloom.worker.agents.launched import LaunchedCli
from bloom.worker.agents.npm import Launcher
from bloom.worker.agents.outcome import Outcome, RunReport

NO_SESSION = re.compile(r"no rollout found for thread id|thread/resume failed", re.IGNORECASE)
"""What the CLI says when the session it was to resume is not in its home."""
SANDBOX_SET = ("--sandbox", "-s", "--dangerously-bypass-approvals-and-sandbox", "--full-auto")
BYPASS = "--dangerously-bypass-approvals-and-sandbox"
SANDBOX_OF_MODE = {
    "default": "read-only",
    "plan": "read-only",
    "acceptEdits": "workspace-write",
}
"""A task's permission mode as the CLI's sandbox (`bypassPermissions`: `BYPASS`)."""


def refusal(tools: ToolPolicy | None) -> str | None:
    """What of a task's tool policy the CLI has no flag for, or None."""
    if tools is None:
        return None
    if tools.ask:
        return "the Codex CLI cannot ask a person before a tool call (policy.tools.ask)"
    if tools.allow or tools.deny:
        return (
            "the Codex CLI has no per-tool allow or deny rules (policy.tools.allow, "
            "policy.tools.deny); its sandbox is set by policy.tools.mode"
        )
    if tools.max_turns is not None:
        return "the Codex CLI has no turn limit (policy.tools.max_turns)"
    return None


def _sets_sandbox(args: list[str]) -> bool:
    return any(
        arg.partition("=")[0] in SANDBOX_SET
        or (arg in ("-c", "--config") and following.startswith("sandbox_mode"))
        for arg, following in zip(args, [*args[1:], ""], strict=True)
    )


def _without_sandbox(args: list[str]) -> list[str]:
    """The fleet's arguments without those that set the sandbox (a task's own mode wins)."""
    kept: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        following = args[index + 1] if index + 1 < len(args) else ""
        if skip:
            skip = False
        elif arg in ("--sandbox", "-s") or (
            arg in ("-c", "--config") and following.startswith("sandbox_mode")
        ):
            skip = True
        elif arg.partition("=")[0] not in SANDBOX_SET:
            kept.append(arg)
    return kept


def sandbox_args(fleet: list[str], tools: ToolPolicy | None, *, workspace: bool) -> list[str]:
    """The fleet's arguments (BLOOM_CODEX_ARGS) and the sandbox: the task's mode when it has
    one, else the fleet's, else `workspace-write` for a workspace task and `read-only` for
    another. Given as `-c sandbox_mode=…`, which `exec` and `exec resume` both take."""
    mode = tools.mode if tools is not None else None
    if mode is None and _sets_sandbox(fleet):
        return list(fleet)
    args = _without_sandbox(fleet) if mode is not None else list(fleet)
    if mode == "bypassPermissions":
        return [*args, BYPASS]
    sandbox = SANDBOX_OF_MODE.get(mode or "", "workspace-write" if workspace else "read-only")
    return [*args, "-c", f'sandbox_mode="{sandbox}"']


@dataclass(slots=True)
class CodexCli(LaunchedCli):
    name: ClassVar[str] = "codex"
    title: ClassVar[str] = "Codex"
    package: ClassVar[str] = cli_install.PACKAGE
    pinned_version: ClassVar[str] = cli_install.PINNED_VERSION

    model: str | None = None
    """The model its arguments or config.toml name (for the cost), if they name one."""

    launcher: ClassVar[Launcher] = cli_install.LAUNCHER
    failure: ClassVar[type[Exception]] = cli_install.CodexCliError

    def refusal(self, tools: ToolPolicy | None) -> str | None:
        return refusal(tools)

    def environment(self, environ: Mapping[str, str], agent_slug: str) -> dict[str, str]:
        return child_environment(environ, self.listed_env)

    def invocation(self, spec: RunSpec, environ: Mapping[str, str]) -> Launch:
        binary = self.runnable(spec)
        tools = spec.policy.tools
        args = ["exec", "--json", "--skip-git-repo-check", "--cd", str(spec.cwd)]
        args += sandbox_args(list(self.extra_args), tools, workspace=spec.workspace)
        if spec.resume:
            args += ["resume", spec.resume]
        return Command(
            binary=binary,
            args=[*args, "-"],
            cwd=spec.cwd,
            env=self.environment(environ, spec.agent_slug),
            timeout_sec=spec.policy.timeout_sec,
            stdin=spec.prompt,
        )

    def parser(self) -> StreamParser:
        return stream.CodexStream(self.model)

    def outcome(self, report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
        return codex_outcome.decide(report, desired_format=desired_format, budget_usd=budget_usd)

    def classify_error(self, text: str) -> tuple[ErrorCode, int | None]:
        return codex_outcome.classify_error(text)

    def session_lost(self, report: RunReport) -> bool:
        failed = report.result is None or not report.result.get("completed")
        return failed and NO_SESSION.search(report.stderr_tail) is not None

    def credentials_problem(self, env: Mapping[str, str]) -> str | None:
        return config.credentials_problem(self.extra_args, env)

    def credentials_fingerprint(self, env: Mapping[str, str]) -> str:
        return config.fingerprint(self.extra_args, env)
