"""What an agent may do: tool rules in the Claude CLI's permission-rule syntax, checked; a
project's defaults (set by admins) merged with a task's own into the policy the task keeps and
the worker hands to the CLI as its own flags (`--allowedTools`, `--disallowedTools`,
`--permission-mode`, `--max-turns`), so that the CLI's permission check refuses what is denied.

A rule is a tool name (`Bash`, `Edit`, `WebFetch`, `mcp__server__tool`), optionally with a
specifier in parentheses (`Bash(git push:*)`, `WebFetch(domain:example.com)`, `Edit(src/**)`).

A call an `ask` rule covers waits for a person's decision (`asks`, docs/approvals.md).
"""

import fnmatch
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

MAX_RULES = 100
"""Rules per list (allow, deny, ask)."""
MAX_RULE_CHARS = 500
MAX_TURNS = 1000
MAX_APPROVAL_TIMEOUT_SEC = 7 * 86_400
TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,127}")
"""A tool's name: a built-in one (`Bash`, `WebFetch`) or an MCP tool's (`mcp__server__tool`)."""
MODES = ("default", "acceptEdits", "plan", "bypassPermissions")
"""Permission modes a policy may give; `bypassPermissions` only where its project allows it."""
BYPASS = "bypassPermissions"
ON_TIMEOUT = ("deny", "fail")
LISTS = ("allow", "deny", "ask")

Mode = Literal["default", "acceptEdits", "plan", "bypassPermissions"]


class PolicyProblem(ValueError):
    """A policy that cannot be taken as it is; the message names the rule or the field."""


def rule_problem(rule: str) -> str | None:
    """What is wrong with a permission rule, or None when it is well formed."""
    if not rule:
        return "a rule must not be empty"
    shown = repr(rule[:60] + ("…" if len(rule) > 60 else ""))
    if len(rule) > MAX_RULE_CHARS:
        return f"rule {shown} is longer than {MAX_RULE_CHARS} characters"
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in rule):
        return f"rule {shown} holds a control character"
    tool, paren, rest = rule.partition("(")
    if not TOOL_NAME.fullmatch(tool):
        return (
            f"rule {shown}: the tool name must be letters, digits, _ and - (starting with a "
            f"letter, at most 128), optionally followed by (specifier)"
        )
    if not paren:
        return None
    if not rest.endswith(")"):
        return f"rule {shown}: the specifier must end the rule with ')'"
    specifier = rest[:-1]
    if not specifier.strip():
        return f"rule {shown}: the specifier in parentheses is empty"
    depth = 0
    for char in specifier:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
    if depth != 0:
        return f"rule {shown}: unbalanced parentheses"
    return None


def rules_problem(rules: Iterable[str]) -> str | None:
    """What is wrong with a list of rules (allow, deny or ask), or None."""
    listed = list(rules)
    if len(listed) > MAX_RULES:
        return f"at most {MAX_RULES} rules"
    for rule in listed:
        problem = rule_problem(rule)
        if problem:
            return problem
    return None


def tool_of(rule: str) -> str:
    """The tool a rule is about: `Bash` for `Bash(git push:*)`."""
    return rule.partition("(")[0]


def _unique(*lists: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(rule for rules in lists for rule in rules))


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """A task's tool rules, as `policy.tools` keeps them (its effective policy once created)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    mode: str | None = None
    max_turns: int | None = None
    approval_timeout_sec: int | None = None
    """How long a call in `ask` waits for a decision (default: approvals.DEFAULT_TIMEOUT_SEC)."""
    on_timeout: str | None = None
    """What no decision in time does: deny the call (the default), or fail the task."""

    def problem(self) -> str | None:
        for name in LISTS:
            problem = rules_problem(getattr(self, name))
            if problem:
                return f"{name}: {problem}"
        if self.mode is not None and self.mode not in MODES:
            return f"mode: must be one of {', '.join(MODES)}"
        if self.max_turns is not None and not 1 <= self.max_turns <= MAX_TURNS:
            return f"max_turns: must be 1..{MAX_TURNS}"
        if self.on_timeout is not None and self.on_timeout not in ON_TIMEOUT:
            return f"on_timeout: must be one of {', '.join(ON_TIMEOUT)}"
        timeout = self.approval_timeout_sec
        if timeout is not None and not 1 <= timeout <= MAX_APPROVAL_TIMEOUT_SEC:
            return f"approval_timeout_sec: must be 1..{MAX_APPROVAL_TIMEOUT_SEC}"
        return None

    def to_json(self) -> dict[str, Any]:
        """As the task keeps it: the three lists always, the rest when given."""
        kept: dict[str, Any] = {"allow": list(self.allow), "deny": list(self.deny)}
        kept["ask"] = list(self.ask)
        for name in ("mode", "max_turns", "approval_timeout_sec", "on_timeout"):
            value = getattr(self, name)
            if value is not None:
                kept[name] = value
        return kept

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ToolPolicy":
        """From what `to_json` wrote (and the API checked): no checks here."""
        return cls(
            allow=tuple(data.get("allow") or ()),
            deny=tuple(data.get("deny") or ()),
            ask=tuple(data.get("ask") or ()),
            mode=data.get("mode"),
            max_turns=data.get("max_turns"),
            approval_timeout_sec=data.get("approval_timeout_sec"),
            on_timeout=data.get("on_timeout"),
        )


@dataclass(frozen=True, slots=True)
class ProjectToolPolicy:
    """A project's defaults (the project: a task's `agent_slug`), set by admins."""

    project: str
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    ask: tuple[str, ...]
    mode: str | None
    max_turns: int | None
    allow_bypass: bool
    """Whether its tasks may run in `bypassPermissions` mode."""
    updated_at: int
    updated_by: str

    def rules(self) -> ToolPolicy:
        return ToolPolicy(self.allow, self.deny, self.ask, self.mode, self.max_turns)

    def problem(self) -> str | None:
        problem = self.rules().problem()
        if problem:
            return problem
        if self.mode == BYPASS and not self.allow_bypass:
            return f"mode: {BYPASS} needs allow_bypass"
        return None


def _not_denied(rules: Iterable[str], deny: tuple[str, ...]) -> tuple[str, ...]:
    """`rules` without those a deny rule covers exactly: the same rule, or its whole tool."""
    denied = set(deny)
    return tuple(rule for rule in rules if rule not in denied and tool_of(rule) not in denied)


def effective(task: ToolPolicy | None, project: ProjectToolPolicy | None) -> ToolPolicy | None:
    """The policy a task runs under: its project's defaults merged with its own.

    deny is the union (a project's deny always wins: an allow or ask rule that a deny rule
    names exactly, or whose whole tool it denies, is dropped; the CLI puts deny before allow
    anyway, for narrower overlaps too); allow and ask are the unions of what is left; the mode
    and the turn limit are the task's if given, else the project's. None when neither has one.
    PolicyProblem: `bypassPermissions` where the project does not allow it."""
    if task is None and project is None:
        return None
    mine = task or ToolPolicy()
    base = project.rules() if project else ToolPolicy()
    deny = _unique(base.deny, mine.deny)
    merged = ToolPolicy(
        allow=_not_denied(_unique(base.allow, mine.allow), deny),
        deny=deny,
        ask=_not_denied(_unique(base.ask, mine.ask), deny),
        mode=mine.mode if mine.mode is not None else base.mode,
        max_turns=mine.max_turns if mine.max_turns is not None else base.max_turns,
        approval_timeout_sec=mine.approval_timeout_sec,
        on_timeout=mine.on_timeout,
    )
    if merged.mode == BYPASS and not (project and project.allow_bypass):
        where = project.project if project else "this project"
        raise PolicyProblem(
            f"mode: {BYPASS} is not allowed for {where!r} (an admin allows it: "
            f"bloom policy set PROJECT --allow-bypass)"
        )
    return merged


def cli_args(policy: ToolPolicy) -> list[str]:
    """The CLI's own flags for a policy: one `--allowedTools`/`--disallowedTools` per rule
    (repeated flags add up; a rule may hold spaces and commas inside its parentheses), the
    permission mode and the turn limit."""
    args: list[str] = []
    for rule in policy.allow:
        args += ["--allowedTools", rule]
    for rule in policy.deny:
        args += ["--disallowedTools", rule]
    if policy.mode is not None:
        args += ["--permission-mode", policy.mode]
    if policy.max_turns is not None:
        args += ["--max-turns", str(policy.max_turns)]
    return args


SHELL_SEPARATORS = re.compile(r"&&|\|\||[;|&\n()`]|\$\(")


def asks(rule: str, tool_name: str, tool_input: Mapping[str, Any]) -> bool:
    """Whether the call may be one `rule` covers: it errs towards yes (a person is asked once
    too often), as the CLI's own check of the same rule stands behind it (docs/approvals.md).
    `Bash(prefix:*)` and `Bash(command)`: some part of the command line (split at `;`, `&&`,
    `|`, ...) starts with the prefix, or is the command; `WebFetch(domain:D)`: the URL's host
    is D or under it; another tool's specifier: a path or string of its input matches it as
    a glob (`**` crossing directories), else any call of the tool."""
    tool, paren, rest = rule.partition("(")
    if tool != tool_name:
        return False
    if not paren:
        return True
    specifier = rest[:-1]
    if tool == "Bash":
        command = str(tool_input.get("command", ""))
        parts = [part.strip() for part in SHELL_SEPARATORS.split(command)]
        if specifier.endswith(":*"):
            prefix = specifier[:-2]
            return any(part.startswith(prefix) for part in parts) or prefix in command
        return any(part == specifier.strip() for part in parts) or specifier in command
    if tool == "WebFetch" and specifier.startswith("domain:"):
        domain = specifier.removeprefix("domain:").lower()
        host = _host(str(tool_input.get("url", "")))
        return host == domain or host.endswith("." + domain) or not host
    pattern = "*" + specifier.lstrip("~/.")
    strings = [value for value in tool_input.values() if isinstance(value, str)]
    return not strings or any(fnmatch.fnmatchcase(value, pattern) for value in strings)


def _host(url: str) -> str:
    after = url.split("://", 1)[-1]
    return after.split("/", 1)[0].split("@")[-1].split(":")[0].lower()
