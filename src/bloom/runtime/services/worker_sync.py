"""Workers discovered through Membridge: every sync mirrors its agent list into the registry.

A worker known only through Membridge takes Membridge's word for its status and capabilities;
its agent URL is only proposed (`pending_url`) until an admin approves it, since whoever holds
Membridge's admin key can list an agent at any address. A worker that has spoken to the runtime
itself keeps its own word: the sync only notes that Membridge still lists it. Any online worker
that nobody has heard of for the liveness window, neither through Membridge nor directly, goes
offline (REFERENCE_BEHAVIOUR §9.1 items 8 and 9 are the reference's failures here).
"""

from dataclasses import dataclass, field
from typing import Any

import structlog

from bloom.clients.membridge import MembridgeClient, MembridgeUnavailable
from bloom.domain.audit import AuditAction, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.fleet import (
    Agent,
    Sighting,
    gone_quiet,
    parse_agent,
    parse_sighting,
    url_change,
)
from bloom.domain.models import AuditEntry, Worker
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import RuntimeDatabase

ACTOR = "membridge_sync"
log = structlog.get_logger(__name__)


@dataclass(slots=True)
class SyncOutcome:
    listed: int = 0
    skipped: int = 0
    discovered: list[str] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)
    heard: list[str] = field(default_factory=list)
    """Workers a recent node heartbeat to Membridge was news of."""


class WorkerSync:
    def __init__(
        self,
        db: RuntimeDatabase,
        client: MembridgeClient,
        signal: QueueSignal,
        clock: Clock,
        *,
        live_ms: int,
        timeout_sec: float = 8.0,
    ):
        self.db = db
        self.client = client
        self.signal = signal
        self.clock = clock
        self.live_ms = live_ms
        self.timeout_sec = timeout_sec

    async def sync_once(self) -> SyncOutcome | None:
        """One pass; None when Membridge could not give its agent list (then nothing changes)."""
        listing = await self._fetch("/agents")
        raw_agents = listing.get("agents") if isinstance(listing, dict) else listing
        if not isinstance(raw_agents, list):
            return None
        agents = [agent for agent in map(parse_agent, raw_agents) if agent is not None]
        seen = await self._fetch("/nodes")  # the reference's control plane has none: no sightings
        sightings = [s for s in map(parse_sighting, seen if isinstance(seen, list) else []) if s]
        outcome = await self._apply(agents, sightings, self.clock())
        outcome.skipped = len(raw_agents) - len(agents)
        if outcome.skipped:
            log.warning(
                "membridge_agents_skipped",
                count=outcome.skipped,
                reason="no usable name (letters, digits and ._:@- only, 1..128 characters)",
            )
        if outcome.discovered or outcome.heard:  # online now: their claims look
            self.signal.changed(Wake(0, frozenset(outcome.discovered + outcome.heard)))
        return outcome

    async def _fetch(self, path: str) -> Any:
        """Membridge's JSON answer to `GET path`, or None when it has none to give."""
        try:
            response = await self.client.request(
                "GET", path, retries=1, timeout_sec=self.timeout_sec
            )
        except MembridgeUnavailable:
            return None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def _apply(self, agents: list[Agent], sightings: list[Sighting], now: int) -> SyncOutcome:
        outcome = SyncOutcome(listed=len(agents))
        async with self.db.write() as tx:
            recent = (s for s in sightings if s.seen_at >= now - self.live_ms)
            for sighting in recent:
                if await tx.workers.heard_through_membridge(sighting.id, sighting.seen_at):
                    outcome.heard.append(sighting.id)
            known = {worker.id: worker for worker in await tx.workers.find()}
            for agent in agents:
                if await tx.workers.insert_new(_discovered(agent, now)):
                    outcome.discovered.append(agent.id)
                    await tx.audit.add(
                        worker_audit(
                            AuditAction.WORKER_DISCOVERED,
                            agent.id,
                            now=now,
                            actor=ACTOR,
                            detail=f"Worker {agent.id} listed by Membridge, "
                            f"status={agent.status}, "
                            f"max_concurrency={agent.capabilities['max_concurrency']}",
                        )
                    )
                    if agent.url:
                        await tx.audit.add(_proposed(agent.id, agent.url, "", now))
                    continue
                worker = known.get(agent.id)
                proposal = None
                if worker is not None and worker.source == "membridge":
                    change = url_change(worker.url, worker.pending_url, agent.url, trusted=False)
                    proposal = change.values.get("pending_url", worker.pending_url)
                    if change.action is not None:
                        await tx.audit.add(_proposed(agent.id, agent.url, worker.url, now))
                await tx.workers.apply_agent(agent, proposal, now)
            cutoff = now - self.live_ms
            for worker in gone_quiet(await tx.workers.find(), {a.id for a in agents}, cutoff):
                if await tx.workers.mark_quiet(worker.id, cutoff):
                    outcome.offline.append(worker.id)
                    await tx.audit.add(
                        worker_audit(
                            AuditAction.WORKER_OFFLINE,
                            worker.id,
                            now=now,
                            actor=ACTOR,
                            detail=f"Worker {worker.id} unheard of for {self.live_ms // 1000}s",
                        )
                    )
        return outcome


def _proposed(worker_id: str, url: str, was: str, now: int) -> AuditEntry:
    return worker_audit(
        AuditAction.WORKER_URL_PROPOSED,
        worker_id,
        now=now,
        actor=ACTOR,
        detail=f"Membridge lists agent URL {url} for worker {worker_id}; an admin approves it "
        f"(bloom worker approve {worker_id}) (was: {was or 'none'})",
    )


def _discovered(agent: Agent, now: int) -> Worker:
    """A worker Membridge lists and the runtime did not know: its URL only proposed."""
    return Worker(
        id=agent.id,
        node_id=agent.id,
        url="",
        pending_url=agent.url or None,
        status=agent.status,
        capabilities=agent.capabilities,
        last_heartbeat=agent.last_seen,
        ip_addrs=agent.ip_addrs,
        obs_count=0,
        db_sha="",
        registered_at=now,
        active_leases=0,
        agent_version="unknown",
        os_info="",
        install_method="membridge",
        source="membridge",
        membridge_seen_at=now,
    )
