"""The agent registry: register (create or update), list, remove."""

from dataclasses import dataclass
from typing import Any

from bloom.domain.clock import Clock
from bloom.domain.errors import NotFound
from bloom.membridge.models import DEFAULT_CAPABILITIES, Agent
from bloom.membridge.storage.repositories import MembridgeDatabase


@dataclass(slots=True)
class Registration:
    """A validated registration. None means "not sent": a new agent gets the default, an
    existing one keeps what is stored. `capabilities` holds only the keys that were sent."""

    name: str
    url: str | None = None
    status: str | None = None
    capabilities: dict[str, Any] | None = None


class AgentService:
    def __init__(self, db: MembridgeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def register(self, reg: Registration) -> tuple[Agent, bool]:
        """Create the agent, or update the one with this name. Returns (agent, created).

        Unlike the reference (409 on a second registration), registering again is how an agent
        or an operator updates it; capability keys not sent keep their stored values.
        """
        now = self.clock()
        sent = reg.capabilities or {}
        async with self.db.write() as tx:
            fresh = Agent(
                name=reg.name,
                url=reg.url or "",
                status=reg.status or "unknown",
                capabilities=DEFAULT_CAPABILITIES | sent,
                registered_at=now,
                updated_at=now,
                last_seen=None,
            )
            if await tx.agents.insert_new(fresh):
                return fresh, True
            stored = await tx.agents.lock(reg.name)
            assert stored is not None, "the row exists: the insert just collided with it"
            changes: dict[str, Any] = {"updated_at": now}
            if reg.url is not None:
                changes["url"] = reg.url
            if reg.status is not None:
                changes["status"] = reg.status
            if sent:
                changes["capabilities"] = DEFAULT_CAPABILITIES | stored.capabilities | sent
            updated = await tx.agents.update(reg.name, changes)
            assert updated is not None, "the row is locked by this transaction"
            return updated, False

    async def find(self) -> list[Agent]:
        async with self.db.read() as tx:
            return await tx.agents.find()

    async def remove(self, name: str) -> None:
        async with self.db.write() as tx:
            if not await tx.agents.delete(name):
                raise NotFound(f"Agent '{name}' not found")
