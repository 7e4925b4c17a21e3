"""The Claude CLI's command line: `claude -p --output-format stream-json --verbose`, the prompt on
stdin, `--resume`, `--agent`, `--max-budget-usd`, and the task's tool policy as its own flags.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bloom.domain.tool_policy import ToolPolicy, cli_args

BUILTIN_AGENTS = frozenset({"claude", "Explore", "general-purpose", "Plan", "statusline-setup"})


def known_agent(slug: str, search_dirs: list[Path]) -> bool:
    """Whether `slug` names an agent the CLI knows: a built-in one or `<dir>/<slug>.md`."""
    if slug in BUILTIN_AGENTS:
        return True
    return "/" not in slug and any((d / f"{slug}.md").is_file() for d in search_dirs)


@dataclass(frozen=True, slots=True)
class Invocation:
    binary: str
    prompt: str
    cwd: Path
    env: dict[str, str]
    timeout_sec: int
    resume: str | None = None
    agent: str | None = None
    budget_usd: float = 0.0
    extra_args: list[str] = field(default_factory=list)

    @property
    def stdin(self) -> str:
        return self.prompt

    def argv(self) -> list[str]:
        args = [self.binary, "-p", "--output-format", "stream-json", "--verbose", *self.extra_args]
        if self.resume:
            args += ["--resume", self.resume]
        if self.agent:
            args += ["--agent", self.agent]
        if self.budget_usd > 0:
            args += ["--max-budget-usd", f"{self.budget_usd:g}"]
        return args


PERMISSIONS_SET = frozenset({"--permission-mode", "--dangerously-skip-permissions"})
"""Arguments by which BLOOM_CLAUDE_ARGS decides what a run may do without asking."""


def claude_args(fleet: Sequence[str], tools: ToolPolicy | None, *, workspace: bool) -> list[str]:
    """The CLI's arguments beyond the worker's own: BLOOM_CLAUDE_ARGS (`fleet`), then the
    task's tool policy as the CLI's flags (docs/approvals.md).

    Rules add up with the fleet's (repeated --allowedTools/--disallowedTools are unions, and
    the CLI's deny wins over any allow, even under bypassPermissions). A task's own mode wins:
    the fleet's --permission-mode and --dangerously-skip-permissions are dropped then (the CLI
    would keep bypassing under the latter whatever mode follows). Without one, a workspace task
    runs in acceptEdits unless the fleet says otherwise (headless: else no edit is allowed)."""
    args = list(fleet)
    if tools is not None and tools.mode is not None:
        args = _without_permission_mode(args)
    elif workspace and not any(_option(arg) in PERMISSIONS_SET for arg in args):
        args += ["--permission-mode", "acceptEdits"]
    return args + (cli_args(tools) if tools is not None else [])


def _option(arg: str) -> str:
    return arg.partition("=")[0] if arg.startswith("--") else arg


def _without_permission_mode(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--permission-mode":
            skip = True
        elif _option(arg) not in PERMISSIONS_SET:
            kept.append(arg)
    return kept
