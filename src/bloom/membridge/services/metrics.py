"""What Membridge's `/metrics` reports, read from its database at each scrape."""

from collections import Counter
from dataclasses import dataclass

from bloom.membridge.storage.repositories import MembridgeDatabase


@dataclass(frozen=True, slots=True)
class Snapshot:
    agents: dict[str, int]
    nodes: int
    projects: int
    jobs: dict[str, int]


class MetricsService:
    def __init__(self, db: MembridgeDatabase):
        self.db = db

    async def snapshot(self) -> Snapshot:
        async with self.db.read() as tx:
            agents = await tx.agents.find()
            nodes = await tx.nodes.counts()
            projects = await tx.projects.count()
            jobs = await tx.jobs.count_by_status()
        return Snapshot(
            agents=dict(Counter(str(agent.status) for agent in agents)),
            nodes=sum(nodes.values()),
            projects=projects,
            jobs=jobs,
        )
