"""Direct reads of the runtime's tables, to check what the database holds behind the API.

A plain synchronous SQLAlchemy engine on the test database (psycopg or sqlite3), independent of
the server under test. Every read is one statement, so it sees one consistent snapshot.
"""

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Table, create_engine, func, select
from sqlalchemy.pool import NullPool
from sqlalchemy.sql import Select

from bloom.db.database import resolve_database
from bloom.domain.states import TaskStatus
from bloom.runtime.storage.tables import (
    audit_logs,
    leases,
    llm_results,
    llm_tasks,
    runtime_artifacts,
    task_counts,
)


class DatabaseProbe:
    """Reads the runtime's tables directly."""

    def __init__(self, database_url: str):
        target = resolve_database(database_url, Path())
        self.engine = create_engine(target.sync_url, poolclass=NullPool)

    def close(self) -> None:
        self.engine.dispose()

    def rows(self, stmt: Select[Any]) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(stmt)]

    def scalar(self, stmt: Select[Any]) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(stmt).scalar_one()

    def count(self, table: Table, *where: ColumnElement[bool]) -> int:
        return int(self.scalar(select(func.count()).select_from(table).where(*where)))

    def task(self, task_id: str) -> dict[str, Any]:
        (row,) = self.rows(select(llm_tasks).where(llm_tasks.c.id == task_id))
        return row

    def tasks(self) -> list[dict[str, Any]]:
        return self.rows(select(llm_tasks).order_by(llm_tasks.c.id))

    def leases_of(self, task_id: str) -> list[dict[str, Any]]:
        return self.rows(
            select(leases).where(leases.c.task_id == task_id).order_by(leases.c.started_at)
        )

    def all_leases(self) -> list[dict[str, Any]]:
        return self.rows(select(leases).order_by(leases.c.started_at, leases.c.id))

    def active_leases(self) -> list[dict[str, Any]]:
        return self.rows(select(leases).where(leases.c.status == "active"))

    def active_leases_by_worker(self) -> dict[str, int]:
        stmt = (
            select(leases.c.worker_id, func.count())
            .where(leases.c.status == "active")
            .group_by(leases.c.worker_id)
        )
        with self.engine.connect() as conn:
            return {worker: int(n) for worker, n in conn.execute(stmt)}

    def results(self) -> list[dict[str, Any]]:
        return self.rows(select(llm_results).order_by(llm_results.c.id))

    def artifacts(self) -> list[dict[str, Any]]:
        return self.rows(select(runtime_artifacts).order_by(runtime_artifacts.c.id))

    def audit(self, task_id: str | None = None) -> list[dict[str, Any]]:
        stmt = select(audit_logs).order_by(audit_logs.c.timestamp, audit_logs.c.id)
        if task_id is not None:
            stmt = stmt.where(audit_logs.c.task_id == task_id)
        return self.rows(stmt)

    def audit_actions(self, task_id: str) -> Counter[str]:
        return Counter(entry["action"] for entry in self.audit(task_id))

    def full_counts(self) -> tuple[dict[str, int], int]:
        """Tasks per status (every status named) and leases, counted through the tables."""
        by_status = select(llm_tasks.c.status, func.count().label("n")).group_by("status")
        counted = {row["status"]: row["n"] for row in self.rows(by_status)}
        return {str(s): counted.get(str(s), 0) for s in TaskStatus}, self.count(leases)

    def kept_counts(self) -> tuple[dict[str, int], int]:
        """The same as the database keeps them (`task_counts`), summed over the slots by hand."""
        sums = [
            func.coalesce(func.sum(c), 0).label(c.name) for c in task_counts.c if c.name != "slot"
        ]
        (row,) = self.rows(select(*sums))
        return {str(s): int(row[str(s)]) for s in TaskStatus}, int(row["leases"])

    def snapshot(self, task_id: str) -> dict[str, Any]:
        """Everything a fenced call on `task_id` could change: the task row, its leases, and
        the number of results, artifacts and audit entries anywhere."""
        return {
            "task": self.task(task_id),
            "leases": self.leases_of(task_id),
            "results": self.count(llm_results),
            "artifacts": self.count(runtime_artifacts),
            "audit": self.count(audit_logs),
        }
