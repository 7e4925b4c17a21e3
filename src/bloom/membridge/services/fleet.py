"""Heartbeats, the node registry, and the choice of each project's primary node.

Roles are never stored: every answer computes them from the stored choice at the time of the
request (`rules.role_of`), so a choice's expiry needs nobody to act on it.
"""

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway
from bloom.domain.fleet import epoch_ms
from bloom.domain.memory import Lease
from bloom.membridge.models import HeartbeatProject, Leadership, Node
from bloom.membridge.rules import Role, expires_at, in_force, role_of
from bloom.membridge.storage.repositories import MembridgeDatabase
from bloom.memory.leadership import LeadershipUnknown, LeaseStore


@dataclass(slots=True)
class Heartbeat:
    """A validated heartbeat; `last_seen` is what the node reports (seconds or milliseconds)."""

    node_id: str
    canonical_id: str
    obs_count: int | None = None
    db_sha: str | None = None
    last_seen: float | None = None
    ip_addrs: list[str] | None = None
    project_id: str | None = None
    agent_version: str | None = None


@dataclass(frozen=True, slots=True)
class NodeView:
    node: Node
    role: Role


@dataclass(frozen=True, slots=True)
class LeadershipView:
    canonical_id: str
    choice: Leadership | None
    in_force: bool
    nodes: list[NodeView]


log = structlog.get_logger("bloom.membridge")
LeaseStores = Callable[[str], LeaseStore]
"""A project's lease in the memory bucket, by canonical id."""
ISSUER = "membridge"


class FleetService:
    def __init__(self, db: MembridgeDatabase, clock: Clock, leases: LeaseStores | None = None):
        self.db = db
        self.clock = clock
        self.leases = leases
        """With the memory bucket configured, choices are written there as the lease nodes obey
        (compare-and-swap); without it they are only recorded here."""

    async def heartbeat(self, beat: Heartbeat) -> Role:
        """Record the node's report (seen now, by our clock), the project it names, and a sign
        of life of the agent with the node's name; answer the node's role now."""
        now = self.clock()
        node = Node(
            canonical_id=beat.canonical_id,
            node_id=beat.node_id,
            obs_count=beat.obs_count,
            db_sha=beat.db_sha,
            last_seen=now,
            reported_last_seen=epoch_ms(beat.last_seen),
            ip_addrs=list(beat.ip_addrs or []),
            registered_at=now,
            project_id=beat.project_id,
            agent_version=beat.agent_version,
        )
        async with self.db.write() as tx:
            await tx.nodes.put(node)
            if beat.project_id:
                await tx.heartbeat_projects.put(
                    HeartbeatProject(beat.canonical_id, beat.project_id, beat.node_id, now)
                )
            await tx.agents.seen(beat.node_id, now)
            choice = await tx.leadership.get(beat.canonical_id)
        return role_of(beat.node_id, await self._with_lease(beat.canonical_id, choice), now)

    async def sightings(self) -> list[tuple[str, int, int]]:
        """Every node that ever heartbeat: (node id, latest heartbeat in epoch ms, projects)."""
        async with self.db.read() as tx:
            return await tx.nodes.last_seen()

    async def nodes(self, canonical_id: str) -> list[NodeView]:
        return (await self.leadership(canonical_id)).nodes

    async def leadership(self, canonical_id: str) -> LeadershipView:
        async with self.db.read() as tx:
            choice = await tx.leadership.get(canonical_id)
            found = await tx.nodes.of_project(canonical_id)
        choice = await self._with_lease(canonical_id, choice)
        now = self.clock()
        return LeadershipView(
            canonical_id=canonical_id,
            choice=choice,
            in_force=in_force(choice, now),
            nodes=[NodeView(node, role_of(node.node_id, choice, now)) for node in found],
        )

    async def select(
        self, canonical_id: str, primary_node_id: str, lease_seconds: int
    ) -> Leadership:
        """Choose the project's primary for `lease_seconds`, one epoch after the last choice
        (and after the lease's, when the bucket holds one): written to the bucket first, so
        the nodes obey it, then recorded here. `BadGateway` when the bucket cannot take it.

        As in the reference, neither the project nor the node has to be known yet: an operator
        may choose the primary before its first heartbeat.
        """
        now = self.clock()
        until = expires_at(now, lease_seconds)
        if self.leases is None:
            async with self.db.write() as tx:
                return await tx.leadership.choose(
                    canonical_id, primary_node_id, lease_seconds, now, until
                )
        async with self.db.read() as tx:
            stored = await tx.leadership.get(canonical_id)
        try:
            lease = await self.leases(canonical_id).choose(
                primary_node_id=primary_node_id,
                lease_seconds=lease_seconds,
                issued_by=ISSUER,
                now=now // 1000,
                min_epoch=stored.epoch if stored else 0,
            )
        except LeadershipUnknown as exc:
            raise BadGateway(
                f"Leadership not changed, the lease could not be written: {exc}"
            ) from None
        choice = Leadership(canonical_id, primary_node_id, lease.epoch, lease_seconds, now, until)
        async with self.db.write() as tx:
            await tx.leadership.adopt(choice)
        return choice

    async def _with_lease(self, canonical_id: str, choice: Leadership | None) -> Leadership | None:
        """The lease in the bucket when it is newer than the stored choice (nodes write it
        too: bootstrap, renewal, takeover); the stored choice when the bucket cannot say."""
        if self.leases is None:
            return choice
        try:
            lease = (await self.leases(canonical_id).read()).lease
        except LeadershipUnknown as exc:
            log.warning("lease_unreadable", canonical_id=canonical_id, error=str(exc))
            return choice
        if lease is None or (choice is not None and lease.epoch < choice.epoch):
            return choice
        return _as_choice(canonical_id, lease)


def _as_choice(canonical_id: str, lease: Lease) -> Leadership:
    return Leadership(
        canonical_id=canonical_id,
        primary_node_id=lease.primary_node_id,
        epoch=lease.epoch,
        lease_seconds=lease.lease_seconds,
        issued_at=lease.issued_at * 1000,
        expires_at=lease.expires_at * 1000,
    )
