"""SQL for managed projects and their checkouts per node.

A name is taken by the unique index (an insert that collides inserts nothing), a node's status is
one row per project written by upsert, and every writer changes the project's row before its
nodes' rows (PostgreSQL row locks in one order: a delete and a clone's writes never interleave
into a status row left without its project).
"""

from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.domain.models import ManagedProject, ProjectNode
from bloom.runtime.storage.tables import managed_projects, project_node_status

PROJECT_COLUMNS = entity_columns(managed_projects, ManagedProject)
NODE_COLUMNS = entity_columns(project_node_status, ProjectNode)
p, n = managed_projects, project_node_status

_INSERT_NEW = {
    kind: dialect.insert(p).on_conflict_do_nothing(index_elements=[p.c.name]).returning(p.c.id)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_GET = select(*PROJECT_COLUMNS).where(p.c.id == bindparam("b_id"))
_LOCK = _GET.with_for_update()
_BY_NAME = select(*PROJECT_COLUMNS).where(p.c.name == bindparam("b_name"))
_LIST = select(*PROJECT_COLUMNS).order_by(p.c.created_at.desc(), p.c.id.desc())
_UPDATE = update(p).where(p.c.id == bindparam("b_id")).returning(*PROJECT_COLUMNS)
_BEGIN_CLONE = (
    update(p)
    .where(p.c.id == bindparam("b_id"))
    .values(
        clone_status="cloning",
        error_message=None,
        updated_at=bindparam("b_now"),
        primary_node_id=func.coalesce(p.c.primary_node_id, bindparam("b_node")),
    )
    .returning(*PROJECT_COLUMNS)
)
_DELETE = delete(p).where(p.c.id == bindparam("b_id")).returning(*PROJECT_COLUMNS)


def _upsert_node(dialect: Any) -> Any:
    """A node's status, inserted or replacing the one stored; a sync time and repository path
    not given keep the stored ones."""
    stmt = dialect.insert(n)
    return stmt.on_conflict_do_update(
        index_elements=[n.c.project_id, n.c.node_id],
        set_={
            "clone_status": stmt.excluded.clone_status,
            "error_message": stmt.excluded.error_message,
            "last_sync_at": func.coalesce(stmt.excluded.last_sync_at, n.c.last_sync_at),
            "repo_path": func.coalesce(stmt.excluded.repo_path, n.c.repo_path),
        },
    )


_UPSERT_NODE = {
    kind: _upsert_node(d) for kind, d in (("postgresql", postgresql), ("sqlite", sqlite))
}
_NODES = select(*NODE_COLUMNS).where(n.c.project_id == bindparam("b_id")).order_by(n.c.node_id)
_DELETE_NODES = delete(n).where(n.c.project_id == bindparam("b_id"))


class ProjectRepository(Repository):
    async def insert_new(self, project: ManagedProject) -> bool:
        """Insert unless a project of this name exists; True when inserted."""
        return bool(await self.run(_INSERT_NEW[self.kind], entity_values(project, PROJECT_COLUMNS)))

    async def get(self, project_id: str) -> ManagedProject | None:
        return await self.one(ManagedProject, _GET, {"b_id": project_id})

    async def by_name(self, name: str) -> ManagedProject | None:
        return await self.one(ManagedProject, _BY_NAME, {"b_name": name})

    async def lock(self, project_id: str) -> ManagedProject | None:
        """Read the project and hold its row lock to the end of the transaction."""
        return await self.one(ManagedProject, _LOCK, {"b_id": project_id})

    async def find(self) -> list[ManagedProject]:
        """Every project, newest first."""
        return await self.all(ManagedProject, _LIST, {})

    async def update(self, project_id: str, values: dict[str, Any]) -> ManagedProject | None:
        """Change the named columns; None when the project is gone."""
        return await self.one(ManagedProject, _UPDATE, values | {"b_id": project_id})

    async def begin_clone(self, project_id: str, node_id: str, now: int) -> ManagedProject | None:
        """The project is being cloned to `node_id`, which becomes its primary only if it has
        none; None when the project is gone."""
        params = {"b_id": project_id, "b_node": node_id, "b_now": now}
        return await self.one(ManagedProject, _BEGIN_CLONE, params)

    async def delete(self, project_id: str) -> ManagedProject | None:
        """Delete the project (its nodes' rows: `delete_nodes`, after); None when there was none."""
        return await self.one(ManagedProject, _DELETE, {"b_id": project_id})

    async def put_node(self, node: ProjectNode) -> None:
        """Store the node's status for its project, in place of the stored one (`_upsert_node`)."""
        await self.run(_UPSERT_NODE[self.kind], entity_values(node, NODE_COLUMNS))

    async def nodes(self, project_id: str) -> list[ProjectNode]:
        """The project's checkouts, by node id."""
        return await self.all(ProjectNode, _NODES, {"b_id": project_id})

    async def delete_nodes(self, project_id: str) -> None:
        await self.run(_DELETE_NODES, {"b_id": project_id})
