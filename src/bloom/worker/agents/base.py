"""The boundary between the worker and one agent CLI (Claude Code, Codex, Gemini CLI, …).

An adapter (`AgentCli`) knows everything that is particular to its CLI: its name, pinned
version and how to find or install the binary; the command line, environment and input for a
run (`invocation`, from a `RunSpec`: the prompt, the session to resume, the task's policy, the
working directory, decisions on deferred tool calls); how to read each line the CLI prints into
task events (`parser`); what a run amounts to (`outcome`: answer, error class and whether to
retry, usage and cost, the session to resume next, or a pause for a decision); its
authentication and quota errors (`classify_error`, `credentials_problem`); and whether a
resumed session was not found (`session_lost`), so that the worker runs it afresh.

What is the same for every CLI stays outside: running the process (its own process group,
timeout, cancel, kill, the prompt held until the lease is confirmed, stderr's tail:
`bloom.worker.agents.process`), the lease, heartbeats, the events' posting, the complete
(`bloom.worker.task_run`). docs/agents.md.
"""

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bloom.clients.wire import Policy
from bloom.domain.retry import ErrorCode
from bloom.worker.agents.outcome import Outcome, RunReport

TaskEvent = tuple[str, Any]
"""A task event as the worker posts it: its type and its data."""

AGENT_EVENT = "agent"
"""The type of the normalised events an adapter without a type of its own posts."""


class EventKind(StrEnum):
    """What a normalised event (`{"kind": …, …}`) says; every CLI's stream maps onto these.

    - `session`: the run started or resumed a session (`session_id`, `model`)
    - `text`: the assistant said something (`text`)
    - `tool_call`: the assistant called a tool (`id`, `name`, `input`)
    - `tool_result`: a tool answered (`id`, `output`, `is_error`)
    - `usage`: tokens (and cost) so far (`input_tokens`, `output_tokens`, `cost_usd`)
    - `result`: the run's final answer (`text`, `is_error`)
    - `error`: the CLI reported an error (`message`)
    """

    SESSION = "session"
    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    USAGE = "usage"
    RESULT = "result"
    ERROR = "error"


def agent_event(kind: EventKind, **data: Any) -> dict[str, Any]:
    """A normalised event's data."""
    return {"kind": str(kind), **data}


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's decision on a tool call a run deferred (`Outcome.pending`), for the run that
    resumes its session; or, `remember`ed, on every equal call (same tool, same input) of the
    task's context."""

    call_id: str
    allow: bool
    reason: str | None = None
    """What the agent is told of a denial (who denied it, and their note)."""
    tool: str = ""
    input_digest: str = ""
    """`approvals.input_digest` of the call's input."""
    remember: bool = False


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of a task, as the worker asks the adapter for it."""

    prompt: str
    """The text for the CLI (the task's prompt, its context hints resolved)."""
    cwd: Path
    """Where the CLI runs: the workspace's worktree, or a directory of the task's own."""
    policy: Policy
    """Timeout, budget and the tool policy (rules, permission mode, turn limit)."""
    agent_slug: str = "default"
    resume: str | None = None
    """The context's session to continue, if any."""
    workspace: bool = False
    """The run edits a workspace (a git worktree the worker commits afterwards)."""
    decisions: tuple[Decision, ...] = ()
    """Resume with these decisions on the calls the session deferred."""
    continues: bool = False
    """The run continues `resume` where it stopped at a deferred call: the prompt is not sent
    again (the session goes on from the call, decided)."""


class Launch(Protocol):
    """What the process runner needs to start a CLI."""

    @property
    def binary(self) -> str: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def timeout_sec(self) -> int: ...
    @property
    def stdin(self) -> str: ...
    def argv(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Command:
    """A `Launch` spelt out: for adapters that need no type of their own."""

    binary: str
    args: list[str]
    cwd: Path
    env: dict[str, str]
    timeout_sec: int
    stdin: str = ""

    def argv(self) -> list[str]:
        return [self.binary, *self.args]


class StreamParser(Protocol):
    """Reads one run's stdout, line by line (one parser per run)."""

    def feed(self, line: str) -> list[TaskEvent]:
        """The task events a line of stdout makes (a line that is no event: a `stderr` one)."""
        ...

    @property
    def final(self) -> dict[str, Any] | None:
        """The run's final record (Claude: its `result` event), once one came."""
        ...


class JsonLinesStream(ABC):
    """A `StreamParser` for a CLI that prints one JSON object a line: each object read into
    normalised `agent` events (`read`); a line that is no object, a `stderr` event."""

    def feed(self, line: str) -> list[TaskEvent]:
        try:
            event = json.loads(line)
        except ValueError:
            return [("stderr", {"line": line[:2000]})]
        if not isinstance(event, dict):
            return [("stderr", {"line": line[:2000]})]
        return [(AGENT_EVENT, data) for data in self.read(event)]

    @abstractmethod
    def read(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The normalised events one of the CLI's JSON objects makes, keeping what the run's
        final record needs."""


class Refused(Exception):
    """The CLI cannot do what the task asks (a policy it has no flag for, decisions it cannot
    resume with): the attempt fails with this reason rather than running without it."""


@dataclass(frozen=True, slots=True)
class Found:
    """Where a CLI was found on this machine, and which version it is."""

    path: Path
    version: str | None
    source: str
    """How: "configured" (the operator's variable), "path" or "cache"."""


@dataclass(slots=True)
class AgentCli(ABC):
    """One agent CLI, as the worker runs it. An instance carries the worker's settings for it
    (its binary, its extra arguments, the environment listed for it)."""

    name: ClassVar[str]
    """The task's `cli` that selects this adapter."""
    title: ClassVar[str]
    package: ClassVar[str]
    """Its npm package."""
    pinned_version: ClassVar[str]
    event_type: ClassVar[str] = AGENT_EVENT
    """The type of the task events its stdout becomes."""

    binary: str
    """What to run: a path, or a name looked up on PATH."""
    extra_args: tuple[str, ...] = ()
    listed_env: tuple[str, ...] = ()
    """More of the worker's environment for this CLI (the operator's patterns)."""
    agent_dirs: tuple[Path, ...] = field(default_factory=tuple)

    # the binary

    @classmethod
    @abstractmethod
    def find(cls, environ: Mapping[str, str]) -> Found | None:
        """The CLI on this machine (the operator's choice, PATH, then the cache), or None."""

    @classmethod
    @abstractmethod
    def install(cls, environ: Mapping[str, str], echo: Callable[[str], None]) -> Path:
        """Fetch the pinned version into the project's cache; the binary's path."""

    @abstractmethod
    def detect(self) -> str | None:
        """The version of the binary this worker runs (`binary`), for its capabilities; None
        when it is not there (blocking; no model is called)."""

    # a run

    @abstractmethod
    def environment(self, environ: Mapping[str, str], agent_slug: str) -> dict[str, str]:
        """What the CLI is given of the worker's environment (an allow-list)."""

    @abstractmethod
    def invocation(self, spec: RunSpec, environ: Mapping[str, str]) -> Launch:
        """The command line, environment and input for `spec`; `Refused` when the CLI cannot
        do what it asks."""

    @abstractmethod
    def parser(self) -> StreamParser:
        """A reader for one run's stdout."""

    @abstractmethod
    def outcome(self, report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
        """What the run amounts to (pure)."""

    @abstractmethod
    def classify_error(self, text: str) -> tuple[ErrorCode, int | None]:
        """The error code for an error the CLI reported as text, and the reset time (epoch ms)
        of a usage limit or quota that says when it ends."""

    @abstractmethod
    def session_lost(self, report: RunReport) -> bool:
        """The run failed because the session it was to resume is not there (its transcript
        is gone): the worker forgets it and runs the task afresh."""

    def normalise(self, kind: str, data: Any) -> list[dict[str, Any]]:
        """A task event of this CLI as normalised events (`EventKind`); by default the
        `agent` events are those already."""
        return [data] if kind == AGENT_EVENT and isinstance(data, dict) else []

    # credentials

    @abstractmethod
    def credentials_problem(self, env: Mapping[str, str]) -> str | None:
        """None when the CLI, run with `env`, has credentials (found without calling a model;
        blocking); else why not and what to do."""

    @abstractmethod
    def credentials_fingerprint(self, env: Mapping[str, str]) -> str:
        """A digest of where the CLI finds its credentials: it changes when they do."""
