"""SQL for the append-mostly records: artifacts, results, audit entries and settings."""

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.domain.models import Artifact, AuditEntry, Result
from bloom.runtime.storage.tables import (
    audit_logs,
    llm_results,
    runtime_artifacts,
    runtime_settings,
)

ARTIFACT_COLUMNS = entity_columns(runtime_artifacts, Artifact)
RESULT_COLUMNS = entity_columns(llm_results, Result)
AUDIT_COLUMNS = entity_columns(audit_logs, AuditEntry)
art, res, aud, cfg = runtime_artifacts, llm_results, audit_logs, runtime_settings

_ARTIFACT_INSERT = insert(art)
_ARTIFACT_GET = select(*ARTIFACT_COLUMNS).where(art.c.id == bindparam("b_id"))
_ARTIFACT_LIST = (
    select(*ARTIFACT_COLUMNS)
    .order_by(art.c.created_at.desc(), art.c.id.desc())
    .limit(bindparam("b_limit"))
)
_ARTIFACT_LIST_FOR_TASK = _ARTIFACT_LIST.where(art.c.task_id == bindparam("b_task"))
_RESULT_INSERT = insert(res)
_RESULT_BY_LEASE = select(*RESULT_COLUMNS).where(res.c.lease_id == bindparam("b_lease"))
_AUDIT_INSERT = insert(aud)
_AUDIT_LIST = (
    select(*AUDIT_COLUMNS)
    .order_by(aud.c.timestamp.desc(), aud.c.id.desc())
    .limit(bindparam("b_limit"))
)
_AUDIT_LIST_FOR_TASK = _AUDIT_LIST.where(aud.c.task_id == bindparam("b_task"))
_SETTINGS_ALL = select(cfg.c.key, cfg.c.value)
_SETTINGS_SWAP = update(cfg).where(
    cfg.c.key == bindparam("b_key"), cfg.c.value == bindparam("b_old")
)
_SETTINGS_PUT = {}
for _kind, _dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
    _upsert = _dialect.insert(cfg)
    _SETTINGS_PUT[_kind] = _upsert.on_conflict_do_update(
        index_elements=[cfg.c.key], set_={"value": _upsert.excluded.value}
    )


class ArtifactRepository(Repository):
    async def insert(self, artifact: Artifact) -> None:
        await self.run(_ARTIFACT_INSERT, entity_values(artifact, ARTIFACT_COLUMNS))

    async def get(self, artifact_id: str) -> Artifact | None:
        return await self.one(Artifact, _ARTIFACT_GET, {"b_id": artifact_id})

    async def find(self, *, task_id: str | None, limit: int) -> list[Artifact]:
        if task_id is None:
            return await self.all(Artifact, _ARTIFACT_LIST, {"b_limit": limit})
        return await self.all(
            Artifact, _ARTIFACT_LIST_FOR_TASK, {"b_limit": limit, "b_task": task_id}
        )


class ResultRepository(Repository):
    async def insert(self, result: Result) -> None:
        await self.run(_RESULT_INSERT, entity_values(result, RESULT_COLUMNS))

    async def get_by_lease(self, lease_id: str) -> Result | None:
        return await self.one(Result, _RESULT_BY_LEASE, {"b_lease": lease_id})


class AuditRepository(Repository):
    async def add(self, entry: AuditEntry) -> None:
        await self.run(_AUDIT_INSERT, entity_values(entry, AUDIT_COLUMNS))

    async def find(self, *, limit: int, task_id: str | None = None) -> list[AuditEntry]:
        if task_id is None:
            return await self.all(AuditEntry, _AUDIT_LIST, {"b_limit": limit})
        return await self.all(
            AuditEntry, _AUDIT_LIST_FOR_TASK, {"b_limit": limit, "b_task": task_id}
        )


class SettingsRepository(Repository):
    async def all_values(self) -> dict[str, str]:
        return {key: value for key, value in await self.rows(_SETTINGS_ALL)}

    async def put(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            await self.run(_SETTINGS_PUT[self.kind], {"key": key, "value": value})

    async def swap(self, key: str, old: str, new: str) -> None:
        """Set `key` to `new` only if it still holds `old` (compare-and-set)."""
        await self.run(_SETTINGS_SWAP, {"b_key": key, "b_old": old, "value": new})
