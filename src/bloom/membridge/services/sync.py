"""Sync jobs (REFERENCE_BEHAVIOUR.md §3.5): a pull or push asked of a node's agent for a
project, recorded as a job, the agent's status following what happened. The agent's refusals
(exit codes 2 and 3) are answers, not errors: the job fails with them; an agent that cannot be
reached or answers nonsense is a 502 with the reason."""

import uuid
from dataclasses import dataclass, replace
from typing import Any

import httpx

from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway, NotFound
from bloom.domain.fleet import agent_key_header
from bloom.membridge.models import Agent, Job
from bloom.membridge.storage.repositories import MembridgeDatabase

ACTIONS = ("pull", "push")


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    ok: bool
    project: str
    agent: str
    canonical_id: str
    detail: str
    job_id: str


class SyncService:
    def __init__(self, db: MembridgeDatabase, clock: Clock, http: httpx.AsyncClient, key: str):
        self.db = db
        self.clock = clock
        self.http = http
        self.key = key

    async def sync(
        self, action: str, project: str, agent: str, request_id: str | None
    ) -> SyncOutcome:
        assert action in ACTIONS
        async with self.db.write() as tx:
            known = await tx.projects.get(project)
            if known is None:
                raise NotFound(f"Project '{project}' not found")
            target = await tx.agents.get(agent)
            if target is None:
                raise NotFound(f"Agent '{agent}' not found")
            job = Job(
                id=uuid.uuid4().hex[:16], action=action, project=project, agent=agent,
                canonical_id=known.canonical_id, status="pending", detail=None, stdout=None,
                stderr=None, returncode=None, dryrun=False, created_at=self.clock(),
                finished_at=None, request_id=request_id,
            )  # fmt: skip
            await tx.jobs.add(job)
            await tx.agents.update(agent, {"status": "syncing"})
        try:
            answer = await self._ask(target, action, project)
        except BadGateway as exc:
            offline = "unreachable" in exc.message
            await self._end(job, "offline" if offline else "error", status="error",
                            detail=exc.message)  # fmt: skip
            raise
        ok = answer.get("ok") is True
        detail = str(answer.get("detail") or f"{action} {'completed' if ok else 'failed'}")
        returncode = answer.get("returncode")
        await self._end(
            job,
            "online",
            status="completed" if ok else "failed",
            detail=detail,
            stdout=_text(answer.get("stdout")),
            stderr=_text(answer.get("stderr")),
            returncode=returncode if isinstance(returncode, int) else None,
        )
        return SyncOutcome(ok, project, agent, known.canonical_id, detail, job.id)

    async def _ask(self, agent: Agent, action: str, project: str) -> dict[str, Any]:
        url = f"{agent.url.rstrip('/')}/sync/{action}"
        headers = agent_key_header(self.key, agent.name)
        try:
            response = await self.http.post(url, json={"project": project}, headers=headers)
            response.raise_for_status()
            answer = response.json()
        except httpx.ConnectError:
            raise BadGateway(f"Agent '{agent.name}' unreachable at {agent.url}") from None
        except httpx.HTTPStatusError as exc:
            status = exc.response
            raise BadGateway(f"Agent error: {status.status_code} {status.text[:200]}") from None
        except (httpx.HTTPError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            raise BadGateway(f"Agent communication error: {reason}") from None
        if not isinstance(answer, dict):
            raise BadGateway("Agent communication error: the answer is not a JSON object")
        return answer

    async def _end(self, job: Job, agent_status: str, **outcome: Any) -> None:
        now = self.clock()
        changes: dict[str, Any] = {"status": agent_status}
        if agent_status == "online":
            changes["last_seen"] = now
        async with self.db.write() as tx:
            await tx.jobs.finish(replace(job, finished_at=now, **outcome))
            await tx.agents.update(job.agent, changes)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
