"""What `bloom bench --graph` reads back from the database once a graph is drained: each task's
grants, completions and releases as stored, and the tasks per status counted through the table
(not the kept counts of `task_counts`). Synchronous: run it in a thread."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select

from bloom.db.database import DatabaseTarget
from bloom.domain.audit import AuditAction
from bloom.runtime.storage.bulk import connect
from bloom.runtime.storage.tables import audit_logs, leases, llm_results, llm_tasks

CHUNK_IDS = 500
"""Task ids named per statement (SQLite's bound on a statement's arguments is far above)."""


@dataclass(slots=True)
class TaskLedger:
    """One task as the database holds it; times are the server's clock, epoch ms."""

    granted_at: list[int] = field(default_factory=list)
    """When each of its leases started."""
    completed_at: list[int] = field(default_factory=list)
    """When each of its successful results was stored."""
    released: int = 0
    """Its `task_released` audit entries: the times it was queued by its last dependency."""


def ledgers(target: DatabaseTarget, task_ids: Iterable[str]) -> dict[str, TaskLedger]:
    """These tasks' grants, successful results and release entries, by id."""
    ids = list(task_ids)
    found = {task_id: TaskLedger() for task_id in ids}
    released = AuditAction.TASK_RELEASED.value
    with connect(target) as conn:
        for start in range(0, len(ids), CHUNK_IDS):
            chunk = ids[start : start + CHUNK_IDS]
            grants = select(leases.c.task_id, leases.c.started_at).where(
                leases.c.task_id.in_(chunk)
            )
            for task_id, at in conn.execute(grants):
                found[task_id].granted_at.append(int(at))
            results = select(llm_results.c.task_id, llm_results.c.completed_at).where(
                llm_results.c.task_id.in_(chunk), llm_results.c.status == "success"
            )
            for task_id, at in conn.execute(results):
                found[task_id].completed_at.append(int(at))
            entries = (
                select(audit_logs.c.task_id, func.count())
                .where(audit_logs.c.task_id.in_(chunk), audit_logs.c.action == released)
                .group_by(audit_logs.c.task_id)
            )
            for task_id, count in conn.execute(entries):
                found[task_id].released = int(count)
    return found


def count_by_status(target: DatabaseTarget) -> dict[str, int]:
    """Every task counted, per status it is in (statuses no task is in left out)."""
    statement = select(llm_tasks.c.status, func.count()).group_by(llm_tasks.c.status)
    with connect(target) as conn:
        return {str(status): int(count) for status, count in conn.execute(statement)}
