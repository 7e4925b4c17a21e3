"""SQL for `membridge_jobs`: the sync jobs log, newest first."""

from sqlalchemy import bindparam, func, insert, select, update

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.membridge.models import Job
from bloom.membridge.storage.tables import jobs

JOB_COLUMNS = entity_columns(jobs, Job)
j = jobs

_INSERT = insert(j)
_GET = select(*JOB_COLUMNS).where(j.c.id == bindparam("b_id"))
_LIST = (
    select(*JOB_COLUMNS).order_by(j.c.created_at.desc(), j.c.id.desc()).limit(bindparam("b_limit"))
)
_LIST_FOR_PROJECT = _LIST.where(j.c.project == bindparam("b_project"))
_FINISHED = ("status", "detail", "stdout", "stderr", "returncode", "dryrun", "finished_at")
_FINISH = (
    update(j)
    .where(j.c.id == bindparam("b_id"))
    .values({name: bindparam(f"b_{name}") for name in _FINISHED})
)
_COUNT_BY_STATUS = select(j.c.status, func.count()).group_by(j.c.status)


class JobRepository(Repository):
    async def add(self, job: Job) -> None:
        await self.run(_INSERT, entity_values(job, JOB_COLUMNS))

    async def get(self, job_id: str) -> Job | None:
        return await self.one(Job, _GET, {"b_id": job_id})

    async def find(self, *, limit: int, project: str | None = None) -> list[Job]:
        if project is None:
            return await self.all(Job, _LIST, {"b_limit": limit})
        return await self.all(Job, _LIST_FOR_PROJECT, {"b_limit": limit, "b_project": project})

    async def finish(self, job: Job) -> None:
        """Record how the job ended: its status, what the agent said, when."""
        await self.run(
            _FINISH, {f"b_{name}": getattr(job, name) for name in _FINISHED} | {"b_id": job.id}
        )

    async def count_by_status(self) -> dict[str, int]:
        return {str(status): int(count) for status, count in await self.rows(_COUNT_BY_STATUS)}
