"""SQL for the append-mostly records: artifacts, results, audit entries and settings."""

from sqlalchemy import insert, select

from bloom.domain.ids import new_id
from bloom.domain.models import Artifact, AuditEntry, Result
from bloom.storage.repositories.base import Repository, entity_columns, to_entity
from bloom.storage.tables import audit_logs, llm_results, runtime_artifacts, runtime_settings

ARTIFACT_COLUMNS = entity_columns(runtime_artifacts, Artifact)
RESULT_COLUMNS = entity_columns(llm_results, Result)
AUDIT_COLUMNS = entity_columns(audit_logs, AuditEntry)


class ArtifactRepository(Repository):
    async def insert(self, artifact: Artifact) -> None:
        values = {column.name: getattr(artifact, column.name) for column in ARTIFACT_COLUMNS}
        await self.conn.execute(insert(runtime_artifacts).values(values))

    async def get(self, artifact_id: str) -> Artifact | None:
        stmt = select(*ARTIFACT_COLUMNS).where(runtime_artifacts.c.id == artifact_id)
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Artifact, row) if row else None

    async def find(self, *, task_id: str | None, limit: int) -> list[Artifact]:
        stmt = select(*ARTIFACT_COLUMNS)
        if task_id is not None:
            stmt = stmt.where(runtime_artifacts.c.task_id == task_id)
        stmt = stmt.order_by(
            runtime_artifacts.c.created_at.desc(), runtime_artifacts.c.id.desc()
        ).limit(limit)
        return [to_entity(Artifact, row) for row in await self.conn.execute(stmt)]


class ResultRepository(Repository):
    async def insert(self, result: Result) -> None:
        values = {column.name: getattr(result, column.name) for column in RESULT_COLUMNS}
        await self.conn.execute(insert(llm_results).values(values))

    async def get_by_lease(self, lease_id: str) -> Result | None:
        stmt = select(*RESULT_COLUMNS).where(llm_results.c.lease_id == lease_id)
        row = (await self.conn.execute(stmt)).first()
        return to_entity(Result, row) if row else None

    async def find(self, *, task_id: str, limit: int) -> list[Result]:
        stmt = (
            select(*RESULT_COLUMNS)
            .where(llm_results.c.task_id == task_id)
            .order_by(llm_results.c.completed_at.desc(), llm_results.c.id.desc())
            .limit(limit)
        )
        return [to_entity(Result, row) for row in await self.conn.execute(stmt)]


class AuditRepository(Repository):
    async def add(
        self,
        now: int,
        action: str,
        entity_type: str,
        entity_id: str,
        actor: str,
        detail: str,
        *,
        task_id: str | None = None,
    ) -> None:
        await self.conn.execute(
            insert(audit_logs).values(
                id=new_id(now),
                timestamp=now,
                action=action,
                entity_type=entity_type,
                entity_id=entity_id,
                actor=actor,
                detail=detail,
                task_id=task_id,
            )
        )

    async def find(self, *, limit: int, task_id: str | None = None) -> list[AuditEntry]:
        stmt = select(*AUDIT_COLUMNS)
        if task_id is not None:
            stmt = stmt.where(audit_logs.c.task_id == task_id)
        stmt = stmt.order_by(audit_logs.c.timestamp.desc(), audit_logs.c.id.desc()).limit(limit)
        return [to_entity(AuditEntry, row) for row in await self.conn.execute(stmt)]


class SettingsRepository(Repository):
    async def all(self) -> dict[str, str]:
        rows = await self.conn.execute(select(runtime_settings.c.key, runtime_settings.c.value))
        return {key: value for key, value in rows}

    async def put(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            stmt = self.dialect_insert(runtime_settings).values(key=key, value=value)
            stmt = stmt.on_conflict_do_update(
                index_elements=[runtime_settings.c.key], set_={"value": stmt.excluded.value}
            )
            await self.conn.execute(stmt)
