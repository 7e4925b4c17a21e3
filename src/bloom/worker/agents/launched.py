"""What the adapters of CLIs fetched from npm as a launcher (`npm.Launcher`: Codex, Gemini) have
alike: finding, fetching, resolving and versioning the binary, and what every invocation checks
before it builds a command line."""

from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bloom.domain.tool_policy import ToolPolicy
from bloom.worker.agents.base import AgentCli, Found, Refused, RunSpec
from bloom.worker.agents.npm import Launcher


@dataclass(slots=True)
class LaunchedCli(AgentCli):
    launcher: ClassVar[Launcher]
    failure: ClassVar[type[Exception]]
    """What `install` raises when npm cannot fetch it."""

    @classmethod
    def find(cls, environ: Mapping[str, str]) -> Found | None:
        found = cls.launcher.found(environ)
        return Found(*found) if found else None

    @classmethod
    def install(cls, environ: Mapping[str, str], echo: Callable[[str], None]) -> Path:
        return cls.launcher.install(cls.launcher.cache_dir(environ), echo, failure=cls.failure)

    def resolved(self) -> str | None:
        """The binary to run: `binary` when the operator set it (a path, or a name on PATH),
        else the CLI on PATH, else the pinned one in the cache; None when there is none."""
        return self.launcher.resolved(self.binary)

    def detect(self) -> str | None:
        binary = self.resolved()
        return self.launcher.version(binary) if binary else None

    @abstractmethod
    def refusal(self, tools: ToolPolicy | None) -> str | None:
        """Why the CLI cannot run a task with these tool rules (a rule it has no flag for), or
        None."""

    def runnable(self, spec: RunSpec) -> str:
        """The binary to run `spec` with; `Refused` when the CLI cannot do what it asks (its
        tool rules, decisions on deferred calls) or is not on this machine."""
        refused = self.refusal(spec.policy.tools)
        if refused:
            raise Refused(refused)
        if spec.decisions or spec.continues:
            raise Refused(
                f"the {self.title} CLI cannot resume a session with decisions on tool calls"
            )
        binary = self.resolved()
        if binary is None:
            raise Refused(
                f"no {self.title} CLI here ({self.binary or self.name} is not there, nor one in "
                f"{self.launcher.cache_dir()}): `bloom agents install {self.name}`"
            )
        return binary
