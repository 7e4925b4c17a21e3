"""SQL for `membridge_nodes` (the heartbeat registry) and `membridge_leadership`."""

from sqlalchemy import bindparam, func, select
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.membridge.models import Leadership, Node
from bloom.membridge.storage.tables import leadership, nodes

NODE_COLUMNS = entity_columns(nodes, Node)
LEADERSHIP_COLUMNS = entity_columns(leadership, Leadership)
n, ld = nodes, leadership
# What each heartbeat rewrites; `registered_at` stays as the first heartbeat set it.
REPORTED = (
    "obs_count",
    "db_sha",
    "last_seen",
    "reported_last_seen",
    "ip_addrs",
    "project_id",
    "agent_version",
)

_NODE_UPSERT = {}
_SELECT = {}
for _kind, _dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
    _node = _dialect.insert(n)
    _NODE_UPSERT[_kind] = _node.on_conflict_do_update(
        index_elements=[n.c.canonical_id, n.c.node_id],
        set_={name: _node.excluded[name] for name in REPORTED},
    ).returning(*NODE_COLUMNS)
    # One conditional write: a first choice is epoch 1, every later one the stored epoch + 1,
    # so two operators choosing at once get two distinct epochs.
    _choice = _dialect.insert(ld)
    _SELECT[_kind] = _choice.on_conflict_do_update(
        index_elements=[ld.c.canonical_id],
        set_={
            "primary_node_id": _choice.excluded.primary_node_id,
            "lease_seconds": _choice.excluded.lease_seconds,
            "issued_at": _choice.excluded.issued_at,
            "expires_at": _choice.excluded.expires_at,
            "epoch": ld.c.epoch + 1,
        },
    ).returning(*LEADERSHIP_COLUMNS)
# A choice whose epoch another writer (the lease object's compare-and-swap) settled: stored
# unless a newer one is there already.
_ADOPT = {}
for _kind, _dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
    _adopted = _dialect.insert(ld)
    _ADOPT[_kind] = _adopted.on_conflict_do_update(
        index_elements=[ld.c.canonical_id],
        set_={c.name: _adopted.excluded[c.name] for c in LEADERSHIP_COLUMNS[1:]},
        where=_adopted.excluded.epoch > ld.c.epoch,
    )
_NODES_OF = (
    select(*NODE_COLUMNS)
    .where(n.c.canonical_id == bindparam("b_cid"))
    .order_by(n.c.registered_at, n.c.node_id)
)
_COUNTS = select(n.c.canonical_id, func.count()).group_by(n.c.canonical_id)
_LAST_SEEN = (
    select(n.c.node_id, func.max(n.c.last_seen).label("last_seen"), func.count().label("projects"))
    .group_by(n.c.node_id)
    .order_by(n.c.node_id)
)
_LEADERSHIP = select(*LEADERSHIP_COLUMNS).where(ld.c.canonical_id == bindparam("b_cid"))


class NodeRepository(Repository):
    async def put(self, node: Node) -> Node:
        """Insert the node, or rewrite what it reports (keeping `registered_at`)."""
        rows = await self.run(_NODE_UPSERT[self.kind], entity_values(node, NODE_COLUMNS))
        return Node(**rows[0])

    async def of_project(self, canonical_id: str) -> list[Node]:
        """The project's nodes, oldest registration first."""
        return await self.all(Node, _NODES_OF, {"b_cid": canonical_id})

    async def last_seen(self) -> list[tuple[str, int, int]]:
        """(node id, its latest heartbeat in epoch ms, how many projects it reports), by id."""
        return [
            (str(node), int(seen), int(projects))
            for node, seen, projects in await self.rows(_LAST_SEEN)
        ]

    async def counts(self) -> dict[str, int]:
        """Number of nodes per canonical id."""
        return {str(cid): int(count) for cid, count in await self.rows(_COUNTS)}


class LeadershipRepository(Repository):
    async def get(self, canonical_id: str) -> Leadership | None:
        return await self.one(Leadership, _LEADERSHIP, {"b_cid": canonical_id})

    async def choose(
        self, canonical_id: str, primary_node_id: str, lease_seconds: int, now: int, until: int
    ) -> Leadership:
        """Store a new choice of primary, one epoch after the previous one."""
        params = {
            "canonical_id": canonical_id,
            "primary_node_id": primary_node_id,
            "epoch": 1,
            "lease_seconds": lease_seconds,
            "issued_at": now,
            "expires_at": until,
        }
        rows = await self.run(_SELECT[self.kind], params)
        return Leadership(**rows[0])

    async def adopt(self, leadership: Leadership) -> None:
        """Store a choice with its own epoch, unless the stored one is newer."""
        await self.run(_ADOPT[self.kind], entity_values(leadership, LEADERSHIP_COLUMNS))
