"""Automatic memory sync (docs/memory-sync.md): for the projects a worker is given
(`BLOOM_WORKER_MEMORY_PROJECTS`, the agent slugs its tasks name), pull when the worker starts,
push after each task of the project, and remember what the node holds (observations, digest)
for its heartbeats, so the control plane shows which nodes are behind. A sync never fails a task:
its outcome is logged (a secondary's blocked push is routine)."""

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog

from bloom.domain.ids import canonical_id
from bloom.domain.memory import ExitCode, Report
from bloom.memory.actions import Action, perform
from bloom.memory.settings import MemorySettings
from bloom.web.settings import SettingsError

log = structlog.get_logger("bloom.worker")
ROUTINE = {ExitCode.OK, ExitCode.SECONDARY_BLOCKED_PUSH, ExitCode.PRIMARY_REFUSED_PULL}


class MemoryAutoSync:
    def __init__(self, memory: MemorySettings, projects: Iterable[str]):
        self.memory = memory
        self.locks = {project: asyncio.Lock() for project in projects}
        self.held: dict[str, tuple[int, str]] = {}
        """Per project: the observations and digest this node holds, as its last sync saw."""

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
        async with self.locks[project]:
            try:
                report = await perform(action, self.memory.model_copy(update={"project": project}))
            except SettingsError as exc:
                log.error("memory_sync_unconfigured", project=project, error=str(exc))
                return None
        say = log.info if report.code in ROUTINE else log.warning
        say("memory_sync", action=action.value, project=project, code=int(report.code),
            detail=report.detail)  # fmt: skip
        sha, observations = report.facts.get("sha256"), report.facts.get("observations")
        if report.ok and isinstance(sha, str) and isinstance(observations, int):
            self.held[project] = (observations, sha)
        return report

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
