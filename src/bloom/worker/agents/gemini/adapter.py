"""The Gemini CLI as an `AgentCli`: `gemini --output-format stream-json`, headless with the
prompt on stdin, `--resume <session>` for a context's session, `--approval-mode` for the task's
permission mode and `--allowed-tools` for its allow rules; what it cannot do (ask and deny rules,
a turn limit) is refused (docs/agents.md)."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agents.base import (
    Command,
    Launch,
    Refused,
    RunSpec,
    StreamParser,
)
from bloom.worker.agents.gemini import config, stream
from bloom.worker.agents.gemini import install as cli_install
from bloom.worker.agents.gemini import outcome as gemini_outcome
from bloom.worker.agents.gemini.env import child_environment
from bloom.worker.agents.launched import LaunchedCli
from bloom.worker.agents.npm import Launcher
from bloom.worker.agents.outcome import Outcome, RunReport

NO_SESSION = re.compile(
    r"Error resuming session|Invalid session identifier|No previous sessions found", re.IGNORECASE
)
"""What the CLI says when the session it was to resume is not in its home (exit status 42)."""
MODE_SET = ("--approval-mode", "-y", "--yolo")
APPROVAL_OF_MODE = {
    "default": "default",
    "plan": "plan",
    "acceptEdits": "auto_edit",
    "bypassPermissions": "yolo",
}
"""A task's permission mode as the CLI's approval mode. Headless, `default` and `plan` offer the
model only the tools that need no approval (reading, searching); `auto_edit` adds the file edits;
`yolo` everything, the shell too."""
TOOL_NAMES = {
    "Bash": "run_shell_command",
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "replace",
    "MultiEdit": "replace",
    "Glob": "glob",
    "Grep": "grep_search",
    "LS": "list_directory",
    "WebFetch": "web_fetch",
    "WebSearch": "google_web_search",
}
"""The Claude CLI's tool names (the rules' syntax) as the Gemini CLI's; its own names are taken
as they are."""
OWN_TOOLS = frozenset({*TOOL_NAMES.values(), "read_many_files", "save_memory", "write_todos"})
SHELL_PREFIX = re.compile(r"(?P<prefix>[^()*]+?)(?::\*| \*)")
"""A shell rule's specifier that allows a command prefix: `git push:*`, `npm run *`."""


def allowed_tool(rule: str) -> str:
    """An allow rule as the CLI's `--allowed-tools` takes it (`Bash(git push:*)` →
    `run_shell_command(git push)`, `Read` → `read_file`); `Refused` for one it cannot say."""
    tool, paren, rest = rule.partition("(")
    name = TOOL_NAMES.get(tool, tool if tool in OWN_TOOLS else "")
    if not name:
        raise Refused(
            f"the Gemini CLI has no tool for the allow rule {rule!r} (policy.tools.allow): "
            f"name one of {', '.join(sorted(TOOL_NAMES))} or its own tool names"
        )
    if not paren:
        return name
    prefix = SHELL_PREFIX.fullmatch(rest[:-1]) if name == "run_shell_command" else None
    if prefix is None:
        raise Refused(
            f"the Gemini CLI cannot narrow the allow rule {rule!r} (policy.tools.allow): only a "
            "shell command's prefix (Bash(git push:*)), or a whole tool"
        )
    return f"{name}({prefix['prefix'].strip()})"


def refusal(tools: ToolPolicy | None) -> str | None:
    """What of a task's tool policy the CLI has no flag for, or None."""
    if tools is None:
        return None
    if tools.ask:
        return "the Gemini CLI cannot ask a person before a tool call (policy.tools.ask)"
    if tools.deny:
        return (
            "the Gemini CLI has no flag for deny rules (policy.tools.deny; its policy engine "
            "reads them from files only); its tools are set by policy.tools.mode and "
            "policy.tools.allow"
        )
    if tools.max_turns is not None:
        return "the Gemini CLI has no turn limit flag (policy.tools.max_turns)"
    return None


def _sets_mode(args: list[str]) -> bool:
    return any(arg.partition("=")[0] in MODE_SET for arg in args)


def _without_mode(args: list[str]) -> list[str]:
    """The fleet's arguments without those that set the approval mode (a task's own wins)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--approval-mode":
            skip = True
        elif arg.partition("=")[0] not in MODE_SET:
            kept.append(arg)
    return kept


def approval_args(fleet: list[str], tools: ToolPolicy | None, *, workspace: bool) -> list[str]:
    """The fleet's arguments (BLOOM_GEMINI_ARGS) and the approval mode: the task's mode when it
    has one, else the fleet's, else `auto_edit` for a workspace task and `default` for
    another; and the task's allow rules (`--allowed-tools`)."""
    mode = tools.mode if tools is not None else None
    allowed = [allowed_tool(rule) for rule in tools.allow] if tools is not None else []
    rules = ["--allowed-tools", ",".join(allowed)] if allowed else []
    if mode is None and _sets_mode(fleet):
        return [*fleet, *rules]
    args = _without_mode(fleet) if mode is not None else list(fleet)
    approval = APPROVAL_OF_MODE.get(mode or "", "auto_edit" if workspace else "default")
    return [*args, "--approval-mode", approval, *rules]


def resume_args(env: Mapping[str, str], session_id: str, cwd: Path) -> list[str]:
    """How to continue a session: `--resume <id>` when the CLI keeps it for `cwd`'s project
    (or not at all: it then says so, and the worker runs the task afresh); else
    `--session-file <its file>`, which the CLI copies into `cwd`'s project as a new session
    (its messages; a new id, the context's session from then on)."""
    found = config.session_file(env, session_id)
    if found is None or found[1] == config.project_hash(cwd):
        return ["--resume", session_id]
    return ["--session-file", str(found[0])]


@dataclass(slots=True)
class GeminiCli(LaunchedCli):
    name: ClassVar[str] = "gemini"
    title: ClassVar[str] = "Gemini"
    package: ClassVar[str] = cli_install.PACKAGE
    pinned_version: ClassVar[str] = cli_install.PINNED_VERSION

    launcher: ClassVar[Launcher] = cli_install.LAUNCHER
    failure: ClassVar[type[Exception]] = cli_install.GeminiCliError

    def refusal(self, tools: ToolPolicy | None) -> str | None:
        return refusal(tools)

    def environment(self, environ: Mapping[str, str], agent_slug: str) -> dict[str, str]:
        return child_environment(environ, self.listed_env)

    def invocation(self, spec: RunSpec, environ: Mapping[str, str]) -> Launch:
        binary = self.runnable(spec)
        tools = spec.policy.tools
        args = ["--output-format", "stream-json", "--skip-trust"]
        args += approval_args(list(self.extra_args), tools, workspace=spec.workspace)
        env = self.environment(environ, spec.agent_slug)
        if spec.resume:
            args += resume_args(env, spec.resume, spec.cwd)
        return Command(
            binary=binary,
            args=args,
            cwd=spec.cwd,
            env=env,
            timeout_sec=spec.policy.timeout_sec,
            stdin=spec.prompt,
        )

    def parser(self) -> StreamParser:
        return stream.GeminiStream()

    def outcome(self, report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
        return gemini_outcome.decide(report, desired_format=desired_format, budget_usd=budget_usd)

    def classify_error(self, text: str) -> tuple[ErrorCode, int | None]:
        return gemini_outcome.classify_error(text)

    def session_lost(self, report: RunReport) -> bool:
        failed = report.result is None or not report.result.get("completed")
        return failed and NO_SESSION.search(report.stderr_tail) is not None

    def credentials_problem(self, env: Mapping[str, str]) -> str | None:
        return config.credentials_problem(env)

    def credentials_fingerprint(self, env: Mapping[str, str]) -> str:
        return config.fingerprint(env)
