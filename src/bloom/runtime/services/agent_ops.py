"""A node's agent, managed through the runtime: its health, update, restart and uninstall, as the
reference runtime offers them (REFERENCE_BEHAVIOUR.md §1.6 "Agent management"), but an agent
that answers `ok: false` has failed (the reference reported success), and only admins may ask.
Other services call agents through `agent_of` and `ask` too (a project's clone).

Health is asked without the agent key (it is public on the agent); the others send the node's
own key (derived from the fleet's agent key and the worker's id) as `X-MEMBRIDGE-AGENT`. A
successful health check refreshes what the registry knows of the worker.
"""

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from bloom.domain.audit import AuditAction, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway, Invalid, NotFound
from bloom.domain.fleet import agent_key_header
from bloom.domain.models import Worker
from bloom.domain.states import WorkerStatus
from bloom.runtime.storage.repositories import RuntimeDatabase

DEFAULT_REPO_URL = "https://github.com/maxfraieho/membridge.git"
"""Where the reference agent updates itself from, unless the request names another."""


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    timeout_sec: float
    action: AuditAction


UPDATE = Call("POST", "/self-update", 120, AuditAction.AGENT_UPDATED)
RESTART = Call("POST", "/restart", 30, AuditAction.AGENT_RESTARTED)
UNINSTALL = Call("POST", "/uninstall", 60, AuditAction.AGENT_UNINSTALLED)
CLONE = Call("POST", "/clone", 60, AuditAction.PROJECT_CLONED)
"""A managed project's repository cloned (or pulled) on the node (the agent's git may take 300 s;
the reference runtime waits 60)."""
HEALTH_TIMEOUT_SEC = 10
LEASING_KEYS = frozenset({"claude_cli", "max_concurrency", "labels", "workspaces", "clis"})
"""Capabilities the lease engine reads: an agent's health answer never mistypes them."""


class AgentOps:
    def __init__(self, db: RuntimeDatabase, clock: Clock, http: httpx.AsyncClient, agent_key: str):
        self.db = db
        self.clock = clock
        self.http = http
        self.agent_key = agent_key

    async def health(self, worker_id: str) -> dict[str, Any]:
        """`{reachable: true, …the agent's health}`, the worker refreshed and online; or
        `{reachable: false, error}` with the worker offline."""
        worker = await self.agent_of(worker_id)
        try:
            response = await self.http.get(
                worker.url.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_SEC
            )
            data = _object(orjson.loads(response.content))
        except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
            await self._update(worker.id, {"status": WorkerStatus.OFFLINE})
            return {"reachable": False, "error": said(exc)}
        await self._update(worker.id, _refreshed(worker, data, self.clock()))
        return {"reachable": True, **data}

    async def update(
        self, worker_id: str, repo_url: str | None, actor: str | None = None
    ) -> dict[str, Any]:
        worker = await self.agent_of(worker_id)
        data = await self.ask(worker, UPDATE, {"repo_url": repo_url or DEFAULT_REPO_URL})
        version = data.get("version")
        changes = {"agent_version": version} if isinstance(version, str) and version else {}
        detail = f"Agent update triggered on {worker.id}"
        await self._update(worker.id, changes, UPDATE, detail, actor)
        return {"status": "updated", **data}

    async def restart(self, worker_id: str, actor: str | None = None) -> dict[str, Any]:
        worker = await self.agent_of(worker_id)
        data = await self.ask(worker, RESTART, None)
        detail = f"Agent restart triggered on {worker.id}"
        await self._update(worker.id, {}, RESTART, detail, actor)
        return {"status": "restarted", **data}

    async def uninstall(self, worker_id: str, actor: str | None = None) -> dict[str, Any]:
        worker = await self.agent_of(worker_id)
        data = await self.ask(worker, UNINSTALL, None)
        gone = {"status": WorkerStatus.OFFLINE, "agent_version": "uninstalled"}
        detail = f"Agent uninstalled from {worker.id}"
        await self._update(worker.id, gone, UNINSTALL, detail, actor)
        return {"status": "uninstalled", **data}

    async def agent_of(self, worker_id: str) -> Worker:
        """The worker, which must have an agent URL (NotFound, Invalid)."""
        async with self.db.read() as tx:
            worker = await tx.workers.get(worker_id)
        if worker is None:
            raise NotFound("Worker not found")
        if not worker.url:
            raise Invalid("Worker has no URL configured")
        return worker

    async def ask(self, worker: Worker, call: Call, body: Any) -> dict[str, Any]:
        """The agent's answer to `call`; BadGateway when it cannot be had, is not a success, or
        says `ok: false`."""
        try:
            response = await self.http.request(
                call.method,
                worker.url.rstrip("/") + call.path,
                content=orjson.dumps(body) if body is not None else b"",
                headers={
                    "Content-Type": "application/json",
                    **agent_key_header(self.agent_key, worker.id),
                },
                timeout=call.timeout_sec,
            )
        except httpx.HTTPError as exc:
            raise BadGateway(f"Agent unreachable: {said(exc)}") from None
        try:
            data = _object(orjson.loads(response.content))
        except orjson.JSONDecodeError:
            data = {}
        if not response.is_success:
            detail = data.get("detail") or data.get("error") or response.text[:200]
            raise BadGateway(f"Agent returned {response.status_code}: {detail}")
        if data.get("ok") is False:
            detail = data.get("error") or data.get("detail") or "no reason given"
            raise BadGateway(f"Agent reported a failure: {detail}")
        return data

    async def _update(
        self,
        worker_id: str,
        changes: dict[str, Any],
        call: Call | None = None,
        detail: str = "",
        actor: str | None = None,
    ) -> None:
        """Store `changes`; a `call` audited as `actor`'s (the seed's "admin" when None)."""
        now = self.clock()
        async with self.db.write() as tx:
            if changes:
                await tx.workers.update(worker_id, changes)
            if call is not None:
                entry = worker_audit(
                    call.action, worker_id, now=now, actor=actor or "admin", detail=detail
                )
                await tx.audit.add(entry)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"answer": value}


def said(exc: Exception) -> str:
    """A failed call to an agent, for a person: the error's kind and message."""
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def _refreshed(worker: Worker, data: dict[str, Any], now: int) -> dict[str, Any]:
    """What a healthy agent's answer changes: online and seen now, its version and OS, its
    capabilities merged in (ours for the keys leasing reads, unless well-typed), addresses."""
    changes: dict[str, Any] = {"status": WorkerStatus.ONLINE, "last_heartbeat": now}
    version, os_info = data.get("version"), data.get("os_info") or data.get("hostname")
    if isinstance(version, str) and version:
        changes["agent_version"] = version[:128]
    if isinstance(os_info, str) and os_info:
        changes["os_info"] = os_info[:512]
    given = data.get("capabilities")
    if isinstance(given, dict):
        merged = worker.capabilities | {k: v for k, v in given.items() if k not in LEASING_KEYS}
        if isinstance(given.get("claude_cli"), bool):
            merged["claude_cli"] = given["claude_cli"]
        changes["capabilities"] = merged
    ips = data.get("ip_addrs")
    if isinstance(ips, list) and all(isinstance(ip, str) for ip in ips):
        changes["ip_addrs"] = ips[:64]
    return changes
