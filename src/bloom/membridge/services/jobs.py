"""The sync jobs log (read side: nothing in this version starts sync jobs)."""

from bloom.domain.errors import NotFound
from bloom.membridge.models import Job
from bloom.membridge.storage.repositories import MembridgeDatabase


class JobService:
    def __init__(self, db: MembridgeDatabase):
        self.db = db

    async def find(self, *, limit: int, project: str | None = None) -> list[Job]:
        """The newest `limit` jobs, of one project if given."""
        async with self.db.read() as tx:
            return await tx.jobs.find(limit=limit, project=project)

    async def get(self, job_id: str) -> Job:
        async with self.db.read() as tx:
            job = await tx.jobs.get(job_id)
        if job is None:
            raise NotFound(f"Job '{job_id}' not found")
        return job
