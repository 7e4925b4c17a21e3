"""Projects: created by operators, or discovered from heartbeats; and the health counts."""

from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, NotFound
from bloom.domain.ids import canonical_id
from bloom.membridge.models import Project
from bloom.membridge.rules import ProjectEntry, project_listing
from bloom.membridge.storage.repositories import MembridgeDatabase


class ProjectService:
    def __init__(self, db: MembridgeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def create(self, name: str) -> Project:
        project = Project(name=name, canonical_id=canonical_id(name), created_at=self.clock())
        async with self.db.write() as tx:
            if not await tx.projects.insert_new(project):
                raise Conflict(f"Project '{name}' already exists")
        return project

    async def find(self) -> list[ProjectEntry]:
        """Manual projects, then those only heartbeats name (see `project_listing`)."""
        async with self.db.read() as tx:
            manual = await tx.projects.find()
            reported = await tx.heartbeat_projects.find()
            counts = await tx.nodes.counts()
        return project_listing(manual, reported, counts)

    async def remove(self, name: str) -> None:
        """Forget a manual project (by name). Its nodes and leadership stay: they belong to the
        canonical id, which heartbeats keep reporting."""
        async with self.db.write() as tx:
            if not await tx.projects.delete(name):
                raise NotFound(f"Project '{name}' not found")

    async def counts(self) -> tuple[int, int]:
        """(manual projects, agents), for the health check."""
        async with self.db.read() as tx:
            return await tx.projects.count(), await tx.agents.count()
