"""SQL for projects' default tool policies (`tool_policies`, docs/approvals.md)."""

from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.executor import Row
from bloom.db.repository import Repository, entity_columns
from bloom.domain.tool_policy import ProjectToolPolicy
from bloom.runtime.storage.tables import tool_policies

tp = tool_policies
COLUMNS = entity_columns(tp, ProjectToolPolicy)
LISTS = ("allow", "deny", "ask")


def _upserts() -> dict[str, Any]:
    put = {}
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
        insert = dialect.insert(tp)
        put[kind] = insert.on_conflict_do_update(
            index_elements=[tp.c.project],
            set_={column.name: insert.excluded[column.name] for column in COLUMNS[1:]},
        )
    return put


_PUT = _upserts()
_GET = select(*COLUMNS).where(tp.c.project == bindparam("b_project"))
_LIST = select(*COLUMNS).order_by(tp.c.project)
_DELETE = delete(tp).where(tp.c.project == bindparam("b_project")).returning(tp.c.project)


def _policy(row: Row) -> ProjectToolPolicy:
    values = dict(row)
    for name in LISTS:
        values[name] = tuple(values[name] or ())
    values["allow_bypass"] = bool(values["allow_bypass"])
    return ProjectToolPolicy(**values)


class ToolPolicyRepository(Repository):
    async def get(self, project: str) -> ProjectToolPolicy | None:
        rows = await self.run(_GET, {"b_project": project})
        return _policy(rows[0]) if rows else None

    async def find(self) -> list[ProjectToolPolicy]:
        return [_policy(row) for row in await self.run(_LIST, {})]

    async def put(self, policy: ProjectToolPolicy) -> None:
        values = {column.name: getattr(policy, column.name) for column in COLUMNS}
        for name in LISTS:
            values[name] = list(values[name])
        await self.run(_PUT[self.kind], values)

    async def delete(self, project: str) -> bool:
        return bool(await self.run(_DELETE, {"b_project": project}))
