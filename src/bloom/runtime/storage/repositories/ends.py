"""PostgreSQL: an attempt's whole end in one statement, which commits alone.

The lease is ended (compare-and-set: active, unexpired, of that task), the task moved on
(compare-and-set: in flight, still holding that lease), and the result, its artifact and the
audit entry inserted, as data-modifying CTEs chained on one another: each insert takes its row
from the moved task, so when either compare-and-set fails nothing at all is written, and the
statement answers no row. For a failure the services read the task and the lease first
(`task_with_lease`: its attempts and cancel flag decide what follows) and decide the values
(`end_alone`); a success needs no read (`succeed_alone`): the lease's fencing (named, of that
task, the caller's when a worker key is used) is in the statement, and the worker the result
and the audit entry name is the lease's. The same writes in steps, in a transaction, remain for
everything else (SQLite, a replay, a refusal's reason, a budget charge, a worker's row lock).
"""

import functools
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    Table,
    bindparam,
    false,
    insert,
    or_,
    select,
    true,
    update,
)

from bloom.db.repository import Repository, entity_values, is_state, to_entity
from bloom.domain.models import Artifact, AuditEntry, Lease, Result, Task
from bloom.domain.states import IN_FLIGHT, LeaseStatus
from bloom.runtime.storage.repositories.leases import ACTIVE, LEASE_COLUMNS
from bloom.runtime.storage.repositories.records import (
    ARTIFACT_COLUMNS,
    AUDIT_COLUMNS,
    RESULT_COLUMNS,
    TASK_COLUMNS,
)
from bloom.runtime.storage.tables import (
    audit_logs,
    leases,
    llm_results,
    llm_tasks,
    runtime_artifacts,
)

t = llm_tasks


def _copied(
    table: Table,
    prefix: str,
    columns: list[Any],
    source: Any,
    name: str,
    given: dict[str, Any] | None = None,
) -> Any:
    """INSERT of one row (parameters `<prefix><column>`, but `given`'s columns from its
    expressions) for each row of `source`."""
    names = [column.name for column in columns]
    given = given or {}
    row = select(*(given.get(n, bindparam(f"{prefix}{n}", type_=table.c[n].type)) for n in names))
    return insert(table).from_select(names, row.select_from(source)).cte(name)


def _alone_task() -> Any:
    """The task's id, its row locked first, if no task depends on it (else NULL: the statement
    writes nothing, and the end is written in a transaction that tells its dependents). Locked
    before the lease, and re-read once a concurrent create that makes it a dependency (which
    locks it: `GraphRepository.mark_dependents`) commits: that create's flag is seen."""
    locked = (
        select(t.c.id)
        .where(t.c.id == bindparam("b_task"), t.c.has_dependents.is_(false()))
        .with_for_update()
        .cte("alone")
    )
    return select(locked.c.id).scalar_subquery()


@functools.cache
def _end_statement(task_keys: tuple[str, ...], with_artifact: bool) -> Any:
    now = bindparam("b_now", type_=BigInteger())
    ended = (
        update(leases)
        .where(
            leases.c.id == bindparam("b_lease"),
            leases.c.task_id == _alone_task(),
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


@functools.cache
def _success_statement(task_keys: tuple[str, ...], with_artifact: bool) -> Any:
    now = bindparam("b_now", type_=BigInteger())
    worker = bindparam("b_worker", type_=String())
    ended = (
        update(leases)
        .where(
            leases.c.id == bindparam("b_lease"),
            leases.c.task_id == _alone_task(),
            ACTIVE,
            leases.c.expires_at >= now,
            or_(worker.is_(None), leases.c.worker_id == worker),
        )
        .values(status=bindparam("b_lease_status"), ended_at=now)
        .returning(*LEASE_COLUMNS)
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
    both = finished.join(ended, true())
    inserts = [
        _copied(llm_results, "r_", RESULT_COLUMNS, both, "kept", {"worker_id": ended.c.worker_id}),
        _copied(audit_logs, "a_", AUDIT_COLUMNS, both, "noted", {"actor": ended.c.worker_id}),
    ]
    if with_artifact:
        inserts.append(_copied(runtime_artifacts, "f_", ARTIFACT_COLUMNS, finished, "made"))
    return (
        select(
            *(finished.c[column.name] for column in TASK_COLUMNS),
            *(ended.c[column.name].label(f"lease__{column.name}") for column in LEASE_COLUMNS),
        )
        .select_from(both)
        .add_cte(*inserts)
    )


class EndRepository(Repository):
    async def succeed_alone(
        self,
        task_id: str,
        lease_id: str,
        worker_id: str | None,
        now: int,
        *,
        values: dict[str, Any],
        result: Result,
        artifact: Artifact | None,
        audit: AuditEntry,
    ) -> tuple[Task, Lease] | None:
        """PostgreSQL, outside a transaction, without a read first: `end_alone` for a success,
        the lease named (and held by `worker_id` when given); `result`'s worker and `audit`'s
        actor are the lease's. The task as moved on and the lease as ended, or None (nothing
        written)."""
        keys = tuple(sorted(values))
        params = _end_params(task_id, lease_id, now, values, result, artifact, audit)
        params["b_worker"] = worker_id
        for name in ("r_worker_id", "a_actor"):  # the lease's, in the statement
            params.pop(name)
        rows = await self.run(_success_statement(keys, artifact is not None), params)
        if not rows:
            return None
        values_read = dict(rows[0])
        lease = {
            name.removeprefix("lease__"): values_read.pop(name)
            for name in list(values_read)
            if name.startswith("lease__")
        }
        return to_entity(Task, values_read), to_entity(Lease, lease)

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
        params = _end_params(task_id, lease_id, now, values, result, artifact, audit)
        rows = await self.run(_end_statement(keys, artifact is not None), params)
        return to_entity(Task, rows[0]) if rows else None


def _end_params(
    task_id: str,
    lease_id: str,
    now: int,
    values: dict[str, Any],
    result: Result,
    artifact: Artifact | None,
    audit: AuditEntry,
) -> dict[str, Any]:
    """An end statement's parameters: the task's new `values` (`v_`), the lease released, and
    the rows it inserts: result (`r_`), audit entry (`a_`), artifact (`f_`)."""
    params: dict[str, Any] = {f"v_{key}": value for key, value in values.items()}
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
    return params
