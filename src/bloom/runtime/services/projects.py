"""Managed projects: git repositories the runtime clones onto nodes through their agents' `/clone`
(REFERENCE_BEHAVIOUR.md §1.6 "Managed projects"), and their Claude memory synced through
Membridge. As the reference, but: names are unique (409); an agent's `ok: false` is a failure;
a clone never moves an existing primary; propagation calls the agents a few at a time, each
node's status written as its call ends; memory sync sends Membridge the body it reads.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from bloom.domain.audit import AuditAction, managed_project_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway, Conflict, Invalid, NotFound
from bloom.domain.ids import canonical_id, new_id
from bloom.domain.models import AuditEntry, ManagedProject, ProjectNode, Worker
from bloom.domain.states import CHECKED_OUT, CloneStatus
from bloom.runtime.services.agent_ops import CLONE, AgentOps
from bloom.runtime.services.membridge import MembridgeService
from bloom.runtime.storage.repositories import RuntimeDatabase

PROPAGATE_AT_ONCE = 4
"""How many agents a propagation calls at the same time."""
NO_TARGET = "No target node specified. Provide node_id in body or set primary_node_id on project."
ACTOR = "admin"


@dataclass(frozen=True, slots=True)
class NewProject:
    """A validated create request."""

    name: str
    repo_url: str
    target_path: str | None = None
    primary_node_id: str | None = None


class ProjectService:
    def __init__(
        self,
        db: RuntimeDatabase,
        clock: Clock,
        agents: AgentOps,
        membridge: MembridgeService,
        at_once: int = PROPAGATE_AT_ONCE,
    ):
        self.db = db
        self.clock = clock
        self.agents = agents
        self.membridge = membridge
        self.at_once = at_once

    async def create(self, new: NewProject, actor: str | None = None) -> ManagedProject:
        """A pending project; Conflict when the name is taken."""
        now = self.clock()
        project = ManagedProject(
            id=new_id(now),
            name=new.name,
            repo_url=new.repo_url,
            canonical_id=canonical_id(new.name),
            target_path=new.target_path,
            clone_status=CloneStatus.PENDING,
            primary_node_id=new.primary_node_id,
            created_at=now,
            updated_at=now,
            error_message=None,
        )
        async with self.db.write() as tx:
            if not await tx.projects.insert_new(project):
                raise Conflict(f'A project named "{new.name}" exists already')
            detail = f'Created project "{new.name}" with repo {new.repo_url}'
            entry = self._audit(AuditAction.PROJECT_CREATED, project.id, now, detail, actor)
            await tx.audit.add(entry)
        return project

    async def find(self) -> list[ManagedProject]:
        async with self.db.read() as tx:
            return await tx.projects.find()

    async def get(self, project_id: str) -> tuple[ManagedProject, list[ProjectNode]]:
        """The project and its checkouts per node."""
        async with self.db.read() as tx:
            project = await tx.projects.get(project_id)
            if project is None:
                raise NotFound("Project not found")
            return project, await tx.projects.nodes(project_id)

    async def nodes(self, project_id: str) -> list[ProjectNode]:
        return (await self.get(project_id))[1]

    async def delete(self, project_id: str, actor: str | None = None) -> None:
        """The project and its nodes' statuses, in one transaction."""
        now = self.clock()
        async with self.db.write() as tx:
            project = await tx.projects.delete(project_id)
            if project is None:
                raise NotFound("Project not found")
            await tx.projects.delete_nodes(project_id)
            detail = f'Deleted project "{project.name}"'
            entry = self._audit(AuditAction.PROJECT_DELETED, project_id, now, detail, actor)
            await tx.audit.add(entry)

    async def clone(
        self, project_id: str, node_id: str | None, actor: str | None = None
    ) -> dict[str, Any]:
        """Clone the project onto `node_id` (default: its primary, which the first clone sets);
        `{status: "cloned", node, result}`. The target must be a worker with an agent URL before
        anything changes; an agent that fails leaves project and node `failed` (BadGateway)."""
        project = (await self.get(project_id))[0]
        target = node_id or project.primary_node_id
        if not target:
            raise Invalid(NO_TARGET)
        worker = await self.agents.agent_of(target)
        now = self.clock()
        async with self.db.write() as tx:
            started = await tx.projects.begin_clone(project_id, target, now)
            if started is None:
                raise NotFound("Project not found")
            await tx.projects.put_node(_node(project_id, target, CloneStatus.CLONING, now))
        node, result = await self._clone_on(started, worker)
        if node.error_message is not None:
            failed = {"clone_status": CloneStatus.FAILED, "error_message": node.error_message}
            await self._settle(project_id, node, failed)
            raise BadGateway(node.error_message)
        detail = f'Cloned "{project.name}" on node {target}'
        entry = self._audit(AuditAction.PROJECT_CLONED, project_id, self.clock(), detail, actor)
        await self._settle(project_id, node, {"clone_status": CloneStatus.CLONED}, entry)
        return {"status": "cloned", "node": target, "result": result}

    async def propagate(self, project_id: str, actor: str | None = None) -> dict[str, Any]:
        """Clone the project onto every worker with an agent URL (offline ones too) that has no
        checkout of it yet, `at_once` agents at a time, each node's status stored as its call
        ends: `{status: "synced"|"partial", results}`, or `nothing_to_propagate`."""
        now = self.clock()
        async with self.db.write() as tx:
            project = await tx.projects.lock(project_id)
            if project is None:
                raise NotFound("Project not found")
            done = {n.node_id for n in await tx.projects.nodes(project_id)
                    if n.clone_status in CHECKED_OUT}  # fmt: skip
            targets = [w for w in await tx.workers.find() if w.url and w.id not in done]
            if not targets:
                return {
                    "status": "nothing_to_propagate",
                    "message": "All nodes already have this project",
                }
            changes = {"clone_status": CloneStatus.PROPAGATING, "updated_at": now}
            await tx.projects.update(project_id, changes)
            for worker in targets:
                await tx.projects.put_node(_node(project_id, worker.id, CloneStatus.CLONING, now))
        gate = asyncio.Semaphore(self.at_once)

        async def one(worker: Worker) -> ProjectNode:
            async with gate:
                node = (await self._clone_on(project, worker))[0]
            await self._settle(project_id, node, {})
            return node

        nodes = await asyncio.gather(*(one(worker) for worker in targets))
        failed = [node.node_id for node in nodes if node.error_message is not None]
        changes = {
            "clone_status": CloneStatus.FAILED if failed else CloneStatus.SYNCED,
            "error_message": f"Clone failed on {', '.join(failed)}" if failed else None,
        }
        detail = f"Propagated to {len(nodes) - len(failed)}/{len(nodes)} nodes"
        when = self.clock()
        entry = self._audit(AuditAction.PROJECT_PROPAGATED, project_id, when, detail, actor)
        await self._settle(project_id, None, changes, entry)
        return {"status": "partial" if failed else "synced", "results": list(map(_outcome, nodes))}

    async def sync_memory(
        self, project_id: str, direction: str, node_id: str | None, actor: str | None = None
    ) -> dict[str, Any]:
        """Have Membridge ask the node's agent to push or pull the project's memory:
        `{status: "ok", direction, node, result}`; Membridge's refusal, or a sync that failed
        (`ok: false`), is a BadGateway naming why."""
        project = (await self.get(project_id))[0]
        target = node_id or project.primary_node_id
        if not target:
            raise Invalid("No target node specified")
        body = {"project": project.name, "agent": target}
        forwarded = await self.membridge.forward("POST", f"/sync/{direction}", json=body)
        result = forwarded.body
        if not 200 <= forwarded.status < 300 or not isinstance(result, dict):
            error = result.get("error") if isinstance(result, dict) else None
            raise BadGateway(str(error or f"Membridge returned {forwarded.status}"))
        if result.get("ok") is False:
            why = result.get("detail") or "no reason given"
            raise BadGateway(f"Memory {direction} failed on node {target}: {why}")
        action = AuditAction(f"memory_sync_{direction}")
        detail = f'Memory {direction} of "{project.name}" on node {target}'
        async with self.db.write() as tx:
            await tx.audit.add(self._audit(action, project_id, self.clock(), detail, actor))
        return {"status": "ok", "direction": direction, "node": target, "result": result}

    async def _clone_on(
        self, project: ManagedProject, worker: Worker
    ) -> tuple[ProjectNode, dict[str, Any]]:
        """The worker's agent asked to clone the project: the node's status to store (`failed`
        with the agent's failure), and the agent's answer."""
        body = {"repo_url": project.repo_url, "project_name": project.name}
        if project.target_path is not None:
            body["target_path"] = project.target_path
        try:
            result = await self.agents.ask(worker, CLONE, body)
        except BadGateway as exc:
            now = self.clock()
            return _node(project.id, worker.id, CloneStatus.FAILED, now, error=exc.message), {}
        now, path = self.clock(), result.get("path")
        repo_path = path if isinstance(path, str) and path else project.target_path
        node = _node(project.id, worker.id, CloneStatus.CLONED, now, synced=True, path=repo_path)
        return node, result

    async def _settle(
        self,
        project_id: str,
        node: ProjectNode | None,
        changes: dict[str, Any],
        entry: AuditEntry | None = None,
    ) -> None:
        """The project's changes, then the node's status and the audit entry, in one
        transaction; nothing when the project was deleted meanwhile."""
        async with self.db.write() as tx:
            changes = changes | {"updated_at": self.clock()}
            if await tx.projects.update(project_id, changes) is None:
                return
            if node is not None:
                await tx.projects.put_node(node)
            if entry is not None:
                await tx.audit.add(entry)

    def _audit(
        self, action: AuditAction, project_id: str, now: int, detail: str, actor: str | None
    ) -> AuditEntry:
        """An entry audited as `actor`'s (the seed's "admin" when None)."""
        return managed_project_audit(
            action, project_id, now=now, actor=actor or ACTOR, detail=detail
        )


def _node(
    project_id: str,
    node_id: str,
    status: CloneStatus,
    now: int,
    *,
    error: str | None = None,
    synced: bool = False,
    path: str | None = None,
) -> ProjectNode:
    """A node's status at `now` (a sync time only when `synced`; no path: the stored one stays)."""
    return ProjectNode(
        id=new_id(now),
        project_id=project_id,
        node_id=node_id,
        clone_status=status,
        last_sync_at=now if synced else None,
        error_message=error,
        repo_path=path,
    )


def _outcome(node: ProjectNode) -> dict[str, Any]:
    """A node's line in a propagation's answer (`error` only when it failed)."""
    outcome: dict[str, Any] = {"node_id": node.node_id, "status": node.clone_status.value}
    return outcome if node.error_message is None else outcome | {"error": node.error_message}
