"""Automatic memory sync (docs/memory-sync.md): for the projects a worker is given
(`BLOOM_WORKER_MEMORY_PROJECTS`, the agent slugs its tasks name), pull when the worker starts,
push after each task of the project, keep the leases settled (a primary renews its own before it
expires), and remember what the node holds (observations, digest) for its heartbeats, so the
control plane shows which nodes are behind. A sync never fails a task: its outcome is logged (a
secondary's blocked push is routine)."""

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog

from bloom.domain.clock import Clock, system_clock
from bloom.domain.ids import canonical_id
from bloom.domain.memory import ExitCode, Report
from bloom.memory.actions import Action, perform
from bloom.memory.settings import MemorySettings
from bloom.web.settings import SettingsError

log = structlog.get_logger("bloom.worker")
ROUTINE = {ExitCode.OK, ExitCode.SECONDARY_BLOCKED_PUSH, ExitCode.PRIMARY_REFUSED_PULL}
LEASE_CHECK_MAX_SEC = 60.0


class MemoryAutoSync:
    def __init__(
        self, memory: MemorySettings, projects: Iterable[str], clock: Clock = system_clock
    ):
        self.memory = memory
        self.clock = clock
        self.locks = {project: asyncio.Lock() for project in projects}
        self.held: dict[str, tuple[int, str]] = {}
        """Per project: the observations and digest this node holds, as its last sync saw."""
        self.roles: dict[str, str] = {}
        """Per project: this node's role, as the last lease check found it."""

    def covers(self, project: str) -> bool:
        return project in self.locks

    async def start(self) -> None:
        """The session's start: every project pulled (a primary's own changes stay)."""
        for project in sorted(self.locks):
            await self.sync(Action.PULL, project)

    async def sync(self, action: Action, project: str) -> Report | None:
        """`action` for `project` if this worker syncs it (one at a time per project)."""
        if not self.covers(project):
            return None
        report = await self._perform(action, project)
        if report is None:
            return None
        say = log.info if report.code in ROUTINE else log.warning
        say("memory_sync", action=action.value, project=project, code=int(report.code),
            detail=report.detail)  # fmt: skip
        sha, observations = report.facts.get("sha256"), report.facts.get("observations")
        if report.ok and isinstance(sha, str) and isinstance(observations, int):
            self.held[project] = (observations, sha)
        return report

    async def keep_leases(self) -> None:
        """Settle every project's lease, again and again: a primary renews its own past half
        term (and takes back an expired one it is entitled to). Role changes are logged."""
        period = min(LEASE_CHECK_MAX_SEC, self.memory.lease_seconds / 4)
        while True:
            await self.settle_leases()
            await asyncio.sleep(period)

    async def settle_leases(self) -> None:
        for project in sorted(self.locks):
            report = await self._perform(Action.LEADERSHIP, project)
            role = str(report.facts.get("role")) if report and report.ok else "unknown"
            if self.roles.get(project) != role:
                log.info("memory_role", project=project, role=role,
                         detail=report.detail if report else "unconfigured")  # fmt: skip
            self.roles[project] = role

    async def _perform(self, action: Action, project: str) -> Report | None:
        async with self.locks[project]:
            try:
                settings = self.memory.model_copy(update={"project": project})
                return await perform(action, settings, clock=self.clock)
            except SettingsError as exc:
                log.error("memory_sync_unconfigured", project=project, error=str(exc))
                return None

    def beats(self, node_id: str, version: str) -> list[dict[str, Any]]:
        """One heartbeat per project, with what this node holds when known."""
        beats = []
        for project in sorted(self.locks):
            beat: dict[str, Any] = {
                "node_id": node_id,
                "canonical_id": canonical_id(project),
                "project_id": project,
                "agent_version": version,
            }
            if project in self.held:
                beat["obs_count"], beat["db_sha"] = self.held[project]
            beats.append(beat)
        return beats
