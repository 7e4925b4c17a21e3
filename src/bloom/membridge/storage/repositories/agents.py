"""SQL for `membridge_agents`: the agent registry."""

from typing import Any

from sqlalchemy import bindparam, case, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values, is_state
from bloom.membridge.models import Agent
from bloom.membridge.storage.tables import agents

AGENT_COLUMNS = entity_columns(agents, Agent)
a = agents

_GET = select(*AGENT_COLUMNS).where(a.c.name == bindparam("b_name"))
_LOCK = _GET.with_for_update()
_LIST = select(*AGENT_COLUMNS).order_by(a.c.registered_at, a.c.name)
_INSERT_NEW = {
    kind: dialect.insert(a).on_conflict_do_nothing(index_elements=[a.c.name]).returning(a.c.name)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_UPDATE = update(a).where(a.c.name == bindparam("b_name")).returning(*AGENT_COLUMNS)
# A heartbeat from the agent's node: seen now, and online unless it says something more telling.
_SEEN = (
    update(a)
    .where(a.c.name == bindparam("b_name"))
    .values(
        last_seen=bindparam("b_now"),
        status=case(
            (or_(is_state(a.c.status, "unknown"), is_state(a.c.status, "offline")), "online"),
            else_=a.c.status,
        ),
    )
    .returning(a.c.name)
)
_DELETE = delete(a).where(a.c.name == bindparam("b_name")).returning(a.c.name)
_COUNT = select(func.count()).select_from(a)


class AgentRepository(Repository):
    async def get(self, name: str) -> Agent | None:
        return await self.one(Agent, _GET, {"b_name": name})

    async def lock(self, name: str) -> Agent | None:
        """Read the agent and hold its row lock to the end of the transaction (PostgreSQL;
        SQLite's writes are serialised already)."""
        return await self.one(Agent, _LOCK, {"b_name": name})

    async def find(self) -> list[Agent]:
        return await self.all(Agent, _LIST, {})

    async def insert_new(self, agent: Agent) -> bool:
        """Insert unless an agent with this name exists; True when inserted."""
        return bool(await self.run(_INSERT_NEW[self.kind], entity_values(agent, AGENT_COLUMNS)))

    async def update(self, name: str, values: dict[str, Any]) -> Agent | None:
        return await self.one(Agent, _UPDATE, values | {"b_name": name})

    async def seen(self, name: str, now: int) -> bool:
        """Record a sign of life from the agent called `name`; True if there is one."""
        return bool(await self.run(_SEEN, {"b_name": name, "b_now": now}))

    async def delete(self, name: str) -> bool:
        return bool(await self.run(_DELETE, {"b_name": name}))

    async def count(self) -> int:
        return int(await self.scalar(_COUNT))
