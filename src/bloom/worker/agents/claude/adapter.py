"""The Claude CLI as an `AgentCli`: what is Claude's own (its flags, its `stream-json`, its
result event, its errors, its credentials, its npm package) behind the worker's boundary."""

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bloom.domain.retry import ErrorCode
from bloom.worker.agents.base import AgentCli, Found, Launch, Refused, RunSpec, StreamParser
from bloom.worker.agents.claude import approvals, credentials, stream
from bloom.worker.agents.claude import install as cli_install
from bloom.worker.agents.claude import outcome as claude_outcome
from bloom.worker.agents.claude.env import child_environment
from bloom.worker.agents.claude.invocation import Invocation, claude_args, known_agent
from bloom.worker.agents.npm import version_of
from bloom.worker.agents.outcome import Outcome, RunReport

NO_CONVERSATION = "No conversation found"
"""What the CLI says when the session it was to resume is not on this machine."""
UNKNOWN = "unknown"


def _package_version(binary: Path) -> str | None:
    """The version in the npm package's manifest beside the binary (`…/claude-code-linux-x64/`
    or `…/claude-code/bin/`), if one is there."""
    for directory in (binary.parent, binary.parent.parent):
        try:
            manifest = json.loads((directory / "package.json").read_text())
        except (OSError, ValueError):
            continue
        name, version = manifest.get("name"), manifest.get("version")
        if isinstance(name, str) and name.startswith(cli_install.PACKAGE):
            return version if isinstance(version, str) else None
    return None


def _native(binary: Path) -> bool:
    """An executable file of the machine's own (ELF, Mach-O), not a script."""
    try:
        with binary.open("rb") as file:
            head = file.read(4)
    except OSError:
        return False
    return head in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


@dataclass(slots=True)
class ClaudeCli(AgentCli):
    name: ClassVar[str] = "claude"
    title: ClassVar[str] = "Claude"
    package: ClassVar[str] = cli_install.PACKAGE
    pinned_version: ClassVar[str] = cli_install.PINNED_VERSION
    event_type: ClassVar[str] = stream.EVENT_TYPE

    @classmethod
    def find(cls, environ: Mapping[str, str]) -> Found | None:
        chosen = cli_install.configured_claude(environ)
        if chosen:
            path = shutil.which(chosen)
            return Found(Path(path), version_of(path), "configured") if path else None
        on_path = shutil.which("claude", path=environ.get("PATH"))
        if on_path:
            return Found(Path(on_path), version_of(on_path), "path")
        cache = cli_install.cache_dir(environ)
        cached = cli_install.cached_binary(cache)
        if cached is None:
            return None
        return Found(cached, cli_install.installed_version(cache), "cache")

    @classmethod
    def install(cls, environ: Mapping[str, str], echo: Callable[[str], None]) -> Path:
        return cli_install.install_claude(cli_install.cache_dir(environ), echo)

    def detect(self) -> str | None:
        """Claude is always reported (a worker ran it before `clis` existed): its version read
        from the npm package beside the binary, else from `--version` of a native binary, else
        "unknown" (a script standing in for it, or a binary not there yet)."""
        path = shutil.which(self.binary)
        if path is None:
            return UNKNOWN
        resolved = Path(path).resolve()
        return (
            _package_version(resolved)
            or (version_of(resolved) if _native(resolved) else None)
            or UNKNOWN
        )

    def environment(self, environ: Mapping[str, str], agent_slug: str) -> dict[str, str]:
        return child_environment(environ, agent_slug, self.listed_env)

    def invocation(self, spec: RunSpec, environ: Mapping[str, str]) -> Launch:
        tools = spec.policy.tools
        ask = tools.ask if tools is not None else ()
        if (spec.decisions or spec.continues) and not ask:
            raise Refused("decisions on deferred calls, for a task without ask rules")
        slug = spec.agent_slug or "default"
        agent_dirs = [Path.home() / ".claude" / "agents", *self.agent_dirs]
        extra = claude_args(self.extra_args, tools, workspace=spec.workspace)
        if ask:
            extra = approvals.without_bare(extra)
            extra += ["--settings", approvals.settings(ask, spec.decisions)]
        return Invocation(
            binary=self.binary,
            prompt="" if spec.continues else spec.prompt,
            cwd=spec.cwd,
            env=self.environment(environ, slug),
            timeout_sec=spec.policy.timeout_sec,
            resume=spec.resume,
            agent=slug if slug != "default" and known_agent(slug, agent_dirs) else None,
            budget_usd=spec.policy.budget,
            extra_args=extra,
        )

    def parser(self) -> StreamParser:
        return stream.ClaudeStream()

    def outcome(self, report: RunReport, *, desired_format: str, budget_usd: float) -> Outcome:
        return claude_outcome.decide(report, desired_format=desired_format, budget_usd=budget_usd)

    def classify_error(self, text: str) -> tuple[ErrorCode, int | None]:
        return claude_outcome.classify_error(text)

    def session_lost(self, report: RunReport) -> bool:
        failed = report.result is None or bool(report.result.get("is_error"))
        return failed and NO_CONVERSATION in (report.stderr_tail + str(report.result))

    def normalise(self, kind: str, data: Any) -> list[dict[str, Any]]:
        return stream.normalise(data) if kind == self.event_type else []

    def credentials_problem(self, env: Mapping[str, str]) -> str | None:
        return credentials.probe(self.binary, env)

    def credentials_fingerprint(self, env: Mapping[str, str]) -> str:
        return credentials.fingerprint(env)
