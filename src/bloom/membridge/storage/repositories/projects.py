"""SQL for `membridge_projects` (created by operators) and `membridge_heartbeat_projects`
(named by nodes in their heartbeats)."""

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.membridge.models import HeartbeatProject, Project
from bloom.membridge.storage.tables import heartbeat_projects, projects

PROJECT_COLUMNS = entity_columns(projects, Project)
REPORTED_COLUMNS = entity_columns(heartbeat_projects, HeartbeatProject)
p, hp = projects, heartbeat_projects

_INSERT_NEW = {
    kind: dialect.insert(p).on_conflict_do_nothing(index_elements=[p.c.name]).returning(p.c.name)
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_GET = select(*PROJECT_COLUMNS).where(p.c.name == bindparam("b_name"))
_LIST = select(*PROJECT_COLUMNS).order_by(p.c.created_at, p.c.name)
_DELETE = delete(p).where(p.c.name == bindparam("b_name")).returning(p.c.name)
_COUNT = select(func.count()).select_from(p)
_REPORTED_LIST = select(*REPORTED_COLUMNS).order_by(hp.c.project_id, hp.c.canonical_id)
_REPORTED_UPSERT = {}
for _kind, _dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
    _upsert = _dialect.insert(hp)
    _REPORTED_UPSERT[_kind] = _upsert.on_conflict_do_update(
        index_elements=[hp.c.canonical_id],
        set_={
            "project_id": _upsert.excluded.project_id,
            "node_id": _upsert.excluded.node_id,
            "last_seen": _upsert.excluded.last_seen,
        },
    )


class ProjectRepository(Repository):
    async def get(self, name: str) -> Project | None:
        return await self.one(Project, _GET, {"b_name": name})

    async def insert_new(self, project: Project) -> bool:
        """Insert unless a project with this name exists; True when inserted."""
        params = entity_values(project, PROJECT_COLUMNS)
        return bool(await self.run(_INSERT_NEW[self.kind], params))

    async def find(self) -> list[Project]:
        return await self.all(Project, _LIST, {})

    async def delete(self, name: str) -> bool:
        return bool(await self.run(_DELETE, {"b_name": name}))

    async def count(self) -> int:
        return int(await self.scalar(_COUNT))


class HeartbeatProjectRepository(Repository):
    async def put(self, record: HeartbeatProject) -> None:
        """Record that `record.node_id` reported the project now (one row per canonical id)."""
        params = entity_values(record, REPORTED_COLUMNS)
        await self.run(_REPORTED_UPSERT[self.kind], params)

    async def find(self) -> list[HeartbeatProject]:
        return await self.all(HeartbeatProject, _REPORTED_LIST, {})
