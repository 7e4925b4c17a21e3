"""PostgreSQL: an attempt's whole end in one statement, which commits alone.

The lease is ended (compare-and-set: active, unexpired, of that task), the task moved on
(compare-and-set: in flight, still holding that lease), and the result, its artifact and the
audit entry inserted, as data-modifying CTEs chained on one another: each insert takes its row
from the moved task, so when either compare-and-set fails nothing at all is written, and the
statement answers no row. The services read the task and the lease first (`task_with_lease`)
and decide the values; the same writes in steps, in a transaction, remain for everything else
(SQLite, a replay, a refusal's reason, a budget charge, a worker's row lock).
"""

import functools
from typing import Any

from sqlalchemy import BigInteger, Table, bindparam, insert, or_, select, update

from bloom.db.repository import Repository, entity_values, is_state, to_entity
from bloom.domain.models import Artifact, AuditEntry, Result, Task
from bloom.domain.states import IN_FLIGHT, LeaseStatus
from bloom.runtime.storage.repositories.leases import ACTIVE, TASK_COLUMNS
from bloom.runtime.storage.repositories.records import (
    ARTIFACT_COLUMNS,
    AUDIT_COLUMNS,
    RESULT_COLUMNS,
)
from bloom.runtime.storage.tables import (
    audit_logs,
    leases,
    llm_results,
    llm_tasks,
    runtime_artifacts,
)

t = llm_tasks


def _copied(table: Table, prefix: str, columns: list[Any], source: Any, name: str) -> Any:
    """INSERT of one row (parameters `<prefix><column>`) for each row of `source`."""
    names = [column.name for column in columns]
    row = select(*(bindparam(f"{prefix}{n}", type_=table.c[n].type) for n in names))
    return insert(table).from_select(names, row.select_from(source)).cte(name)


@functools.cache
def _end_statement(task_keys: tuple[str, ...], with_artifact: bool) -> Any:
    now = bindparam("b_now", type_=BigInteger())
    ended = (
        update(leases)
        .where(
            leases.c.id == bindparam("b_lease"),
            leases.c.task_id == bindparam("b_task"),
            ACTIVE,
            leases.c.expires_at >= now,
        )
        .values(status=bindparam("b_lease_status"), ended_at=now)
        .returning(leases.c.id)
        .cte("ended")
    )
    finished = (
        update(t)
        .where(
            t.c.id == bindparam("b_task"),
            or_(*(is_state(t.c.status, str(s)) for s in sorted(IN_FLIGHT))),
            t.c.lease_id == ended.c.id,
        )
        .values({key: bindparam(f"v_{key}", type_=t.c[key].type) for key in task_keys})
        .returning(*TASK_COLUMNS)
        .cte("finished")
    )
    inserts = [
        _copied(llm_results, "r_", RESULT_COLUMNS, finished, "kept"),
        _copied(audit_logs, "a_", AUDIT_COLUMNS, finished, "noted"),
    ]
    if with_artifact:
        inserts.append(_copied(runtime_artifacts, "f_", ARTIFACT_COLUMNS, finished, "made"))
    return select(*(finished.c[column.name] for column in TASK_COLUMNS)).add_cte(*inserts)


class EndRepository(Repository):
    async def end_alone(
        self,
        task_id: str,
        lease_id: str,
        now: int,
        *,
        values: dict[str, Any],
        result: Result,
        artifact: Artifact | None,
        audit: AuditEntry,
    ) -> Task | None:
        """PostgreSQL, outside a transaction: the lease released, the task given `values`, and
        `result`, `artifact` and `audit` inserted, in one statement; the task as moved on, or
        None (nothing written) when the lease is no longer live or the task's."""
        keys = tuple(sorted(values))
        params: dict[str, Any] = {f"v_{key}": values[key] for key in keys}
        params |= {
            "b_task": task_id,
            "b_lease": lease_id,
            "b_now": now,
            "b_lease_status": LeaseStatus.RELEASED.value,
        }
        params |= {f"r_{k}": v for k, v in entity_values(result, RESULT_COLUMNS).items()}
        params |= {f"a_{k}": v for k, v in entity_values(audit, AUDIT_COLUMNS).items()}
        if artifact is not None:
            params |= {f"f_{k}": v for k, v in entity_values(artifact, ARTIFACT_COLUMNS).items()}
        rows = await self.run(_end_statement(keys, artifact is not None), params)
        return to_entity(Task, rows[0]) if rows else None
