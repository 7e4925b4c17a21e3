"""SQL for the append-mostly records: artifacts, results, audit entries and settings."""

import functools
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    delete,
    distinct,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.executor import Connection
from bloom.db.repository import (
    Repository,
    entity_columns,
    entity_values,
    is_state,
    older_than,
)
from bloom.domain.models import Artifact, AuditEntry, Result, Task
from bloom.domain.paging import Cursor
from bloom.domain.usage import UsageGroup, UsageSums
from bloom.runtime.storage.tables import (
    audit_logs,
    llm_results,
    llm_tasks,
    runtime_artifacts,
    runtime_settings,
)

ARTIFACT_COLUMNS = entity_columns(runtime_artifacts, Artifact)
RESULT_COLUMNS = entity_columns(llm_results, Result)
AUDIT_COLUMNS = entity_columns(audit_logs, AuditEntry)
TASK_COLUMNS = entity_columns(llm_tasks, Task)
art, res, aud, cfg = runtime_artifacts, llm_results, audit_logs, runtime_settings
tsk = llm_tasks

_ARTIFACT_GET = select(*ARTIFACT_COLUMNS).where(art.c.id == bindparam("b_id"))
_ARTIFACT_LIST = (
    select(*ARTIFACT_COLUMNS)
    .order_by(art.c.created_at.desc(), art.c.id.desc())
    .limit(bindparam("b_limit"))
)
_ARTIFACT_LIST_FOR_TASK = _ARTIFACT_LIST.where(art.c.task_id == bindparam("b_task"))
_ARTIFACT_ELSEWHERE = (
    select(*ARTIFACT_COLUMNS)
    .where(
        art.c.storage != bindparam("b_storage"),
        art.c.sha256.is_not(None),
        art.c.id > bindparam("b_after"),
    )
    .order_by(art.c.id)
    .limit(bindparam("b_limit"))
)
_ARTIFACT_RELOCATE = (
    update(art)
    .where(art.c.id == bindparam("b_id"), art.c.storage == bindparam("b_from"))
    .values(storage=bindparam("b_storage"), url=bindparam("b_url"), content=None)
    .returning(art.c.id)
)
_RESULT_BY_LEASE = select(*RESULT_COLUMNS).where(res.c.lease_id == bindparam("b_lease"))
_RESULTS_OF_TASK = (
    select(*RESULT_COLUMNS)
    .where(res.c.task_id == bindparam("b_task"))
    .order_by(res.c.completed_at, res.c.id)
)
_RESULTS_OF_BRANCH = (
    select(*RESULT_COLUMNS)
    .join(llm_tasks, llm_tasks.c.id == res.c.task_id)
    .where(
        llm_tasks.c.workspace_key == bindparam("b_key"),
        is_state(res.c.status, "success"),
    )
    .order_by(res.c.completed_at.desc(), res.c.id.desc())
    .limit(bindparam("b_limit"))
)
_BUCKET = (
    (res.c.completed_at - bindparam("b_first", type_=BigInteger()))
    // bindparam("b_bucket_ms", type_=BigInteger())
).label("bucket")
_THROUGHPUT = (
    select(
        _BUCKET,
        func.count().filter(is_state(res.c.status, "success")).label("succeeded"),
        func.count().filter(~is_state(res.c.status, "success")).label("failed"),
    )
    .where(
        res.c.completed_at >= bindparam("b_first", type_=BigInteger()),
        res.c.completed_at < bindparam("b_end", type_=BigInteger()),
    )
    .group_by(literal_column("bucket"))
    .order_by(literal_column("bucket"))
)
_WINDOW = (
    res.c.completed_at >= bindparam("b_first", type_=BigInteger()),
    res.c.completed_at < bindparam("b_end", type_=BigInteger()),
)
_USAGE_SUMS = (
    func.count().label("attempts"),
    func.count(distinct(res.c.task_id)).label("tasks"),
    func.count().filter(is_state(res.c.status, "success")).label("succeeded"),
    func.count().filter(~is_state(res.c.status, "success")).label("failed"),
    *(
        func.coalesce(func.sum(res.c[name]), 0).label(name)
        for name in (
            "cost_usd",
            "input_tokens",
            "output_tokens",
            "tokens_used",
            "num_turns",
            "duration_ms",
        )
    ),
)
_USAGE_TOTAL = select(*_USAGE_SUMS).where(*_WINDOW)
_USAGE_KEYS = {
    UsageGroup.PROJECT: tsk.c.agent_slug,
    UsageGroup.AGENT: tsk.c.agent_slug,
    UsageGroup.CONTEXT: tsk.c.context_id,
    UsageGroup.WORKER: res.c.worker_id,
    UsageGroup.MODEL: res.c.model,
    UsageGroup.CLI: tsk.c.cli,
}


@functools.cache
def _usage_statement(group: UsageGroup) -> Any:
    """Sums per group in the window: per bucket in time order for a time group, else the
    costliest groups first, up to a limit."""
    bucket_ms = group.bucket_ms
    if bucket_ms is not None:
        # inlined, not bound: PostgreSQL matches the GROUP BY to the selected key by its text
        length = literal_column(str(bucket_ms), BigInteger())
        key: Any = (res.c.completed_at // length) * length
    else:
        key = _USAGE_KEYS[group]
    stmt = select(key.label("key"), *_USAGE_SUMS).where(*_WINDOW).group_by(key)
    if group in (UsageGroup.PROJECT, UsageGroup.AGENT, UsageGroup.CONTEXT, UsageGroup.CLI):
        stmt = stmt.select_from(res.join(tsk, tsk.c.id == res.c.task_id))
    if bucket_ms is not None:
        return stmt.order_by(key).limit(bindparam("b_limit"))
    costliest: tuple[Any, ...] = (
        literal_column("cost_usd").desc(),
        literal_column("attempts").desc(),
    )
    return stmt.order_by(*costliest, key).limit(bindparam("b_limit"))


_AUDIT_LIST = (
    select(*AUDIT_COLUMNS)
    .order_by(aud.c.timestamp.desc(), aud.c.id.desc())
    .limit(bindparam("b_limit"))
)
_AUDIT_LIST_FOR_TASK = _AUDIT_LIST.where(aud.c.task_id == bindparam("b_task"))
_AUDIT_EQUALS = {"action": aud.c.action, "entity_type": aud.c.entity_type, "actor": aud.c.actor}
"""The audit page filters that are equality on a column, by their parameter name."""


@functools.cache
def _audit_page_statement(equal: frozenset[str], entity: bool, after: bool) -> Any:
    """One page of audit entries, newest first by (timestamp, id), for one shape of filter:
    equality on the columns named in `equal`, an `entity` (its own entries or its task's), rows
    older than a cursor (`after`)."""
    stmt = select(*AUDIT_COLUMNS).order_by(aud.c.timestamp.desc(), aud.c.id.desc())
    for name in sorted(equal):
        stmt = stmt.where(_AUDIT_EQUALS[name] == bindparam(f"b_{name}"))
    if entity:
        entity_id = bindparam("b_entity", type_=String())
        stmt = stmt.where(or_(aud.c.entity_id == entity_id, aud.c.task_id == entity_id))
    if after:
        stmt = stmt.where(older_than(aud.c.timestamp, aud.c.id))
    return stmt.limit(bindparam("b_limit"))


_AUDIT_SETTLED = aud.c.id > bindparam("b_after"), aud.c.timestamp < bindparam("b_before")
_AUDIT_TO_EXPORT = (
    select(*AUDIT_COLUMNS).where(*_AUDIT_SETTLED).order_by(aud.c.id).limit(bindparam("b_limit"))
)
_AUDIT_TO_EXPORT_COUNT = select(func.count()).select_from(aud).where(*_AUDIT_SETTLED)
_AUDIT_PRUNE = (
    delete(aud)
    .where(aud.c.id <= bindparam("b_upto"), aud.c.timestamp < bindparam("b_before"))
    .returning(aud.c.id)
)
_SETTINGS_GET = select(cfg.c.value).where(cfg.c.key == bindparam("b_key"))
_SETTINGS_ALL = select(cfg.c.key, cfg.c.value)
_SETTINGS_SWAP = update(cfg).where(
    cfg.c.key == bindparam("b_key"), cfg.c.value == bindparam("b_old")
)
_SETTINGS_PUT = {}
_SETTINGS_ADVANCE = {}
for _kind, _dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
    _upsert = _dialect.insert(cfg)
    _SETTINGS_PUT[_kind] = _upsert.on_conflict_do_update(
        index_elements=[cfg.c.key], set_={"value": _upsert.excluded.value}
    )
    _SETTINGS_ADVANCE[_kind] = _upsert.on_conflict_do_update(
        index_elements=[cfg.c.key],
        set_={"value": _upsert.excluded.value},
        where=cfg.c.value < _upsert.excluded.value,
    )


class ArtifactRepository(Repository):
    async def insert(self, artifact: Artifact) -> None:
        self.append_row(art, entity_values(artifact, ARTIFACT_COLUMNS))

    async def get(self, artifact_id: str) -> Artifact | None:
        return await self.one(Artifact, _ARTIFACT_GET, {"b_id": artifact_id})

    async def find(self, *, task_id: str | None, limit: int) -> list[Artifact]:
        if task_id is None:
            return await self.all(Artifact, _ARTIFACT_LIST, {"b_limit": limit})
        return await self.all(
            Artifact, _ARTIFACT_LIST_FOR_TASK, {"b_limit": limit, "b_task": task_id}
        )

    async def stored_elsewhere(self, storage: str, *, after_id: str, limit: int) -> list[Artifact]:
        """Artifacts with content not in `storage`, by id after `after_id` (a resumable walk)."""
        params = {"b_storage": storage, "b_after": after_id, "b_limit": limit}
        return await self.all(Artifact, _ARTIFACT_ELSEWHERE, params)

    async def relocate(
        self, artifact_id: str, from_storage: str, storage: str, url: str | None
    ) -> bool:
        """Point the row at its content's new home, if it is still where it was read from."""
        params = {"b_id": artifact_id, "b_from": from_storage, "b_storage": storage, "b_url": url}
        return bool(await self.run(_ARTIFACT_RELOCATE, params))


class ResultRepository(Repository):
    async def insert(self, result: Result) -> None:
        self.append_row(res, entity_values(result, RESULT_COLUMNS))

    async def get_by_lease(self, lease_id: str) -> Result | None:
        return await self.one(Result, _RESULT_BY_LEASE, {"b_lease": lease_id})

    async def of_task(self, task_id: str) -> list[Result]:
        """The task's results, oldest first."""
        return await self.all(Result, _RESULTS_OF_TASK, {"b_task": task_id})

    async def of_branch(self, workspace_key: str, limit: int) -> list[Result]:
        """The successful results of the tasks that wrote one repository branch, oldest first
        (the last `limit`); those that say what they did to it (`workspace`) are the branch's
        history."""
        newest = await self.all(
            Result, _RESULTS_OF_BRANCH, {"b_key": workspace_key, "b_limit": limit}
        )
        return newest[::-1]

    async def usage(
        self, group: UsageGroup, *, first: int, end: int, limit: int
    ) -> list[tuple[Any, UsageSums]]:
        """Results completed in [first, end) summed per `group` key: (key, sums), at most
        `limit` of them (the costliest; a time group's earliest buckets)."""
        params = {"b_first": first, "b_end": end, "b_limit": limit}
        rows = await self.rows(_usage_statement(group), params)
        return [(row[0], _usage_sums(row[1:])) for row in rows]

    async def usage_total(self, *, first: int, end: int) -> UsageSums:
        rows = await self.rows(_USAGE_TOTAL, {"b_first": first, "b_end": end})
        return _usage_sums(rows[0])

    async def throughput(
        self, *, first: int, end: int, bucket_ms: int
    ) -> list[tuple[int, int, int]]:
        """Results completed in [first, end), counted per bucket of `bucket_ms` from `first`:
        (bucket number, succeeded, failed), for the buckets that have any, in order."""
        params = {"b_first": first, "b_end": end, "b_bucket_ms": bucket_ms}
        return [
            (int(bucket), int(ok), int(failed))
            for bucket, ok, failed in await self.rows(_THROUGHPUT, params)
        ]


def _usage_sums(row: Any) -> UsageSums:
    attempts, tasks, succeeded, failed, cost, *counts = row
    return UsageSums(
        int(attempts), int(tasks), int(succeeded), int(failed), float(cost), *map(int, counts)
    )


class AuditRepository(Repository):
    def __init__(self, connection: Connection):
        super().__init__(connection)
        self.added: list[AuditEntry] = []
        """What this transaction wrote, for its `committed` hook."""

    async def add(self, entry: AuditEntry) -> None:
        self.append_row(aud, entity_values(entry, AUDIT_COLUMNS))
        self.added.append(entry)

    def written(self, entry: AuditEntry) -> None:
        """An entry another statement of this transaction inserted (the one-statement writes:
        a heartbeat, a create), for the `committed` hook."""
        self.added.append(entry)

    async def find(self, *, limit: int, task_id: str | None = None) -> list[AuditEntry]:
        if task_id is None:
            return await self.all(AuditEntry, _AUDIT_LIST, {"b_limit": limit})
        return await self.all(
            AuditEntry, _AUDIT_LIST_FOR_TASK, {"b_limit": limit, "b_task": task_id}
        )

    async def page(
        self,
        *,
        equal: dict[str, str],
        entity_id: str | None,
        after: Cursor | None,
        limit: int,
    ) -> list[AuditEntry]:
        """Up to `limit` entries, newest first, older than `after`: those whose columns equal
        `equal` (action, entity_type, actor) and, with `entity_id`, that concern it (as their
        entity or as their task)."""
        params: dict[str, Any] = {f"b_{name}": value for name, value in equal.items()}
        params["b_limit"] = limit
        if entity_id is not None:
            params["b_entity"] = entity_id
        if after is not None:
            params["b_at"], params["b_after_id"] = after.at, after.id
        stmt = _audit_page_statement(frozenset(equal), entity_id is not None, after is not None)
        return await self.all(AuditEntry, stmt, params)

    async def to_export(self, *, after_id: str, before: int, limit: int) -> list[AuditEntry]:
        """Entries after `after_id` written before `before` (epoch ms), in id order."""
        params = {"b_after": after_id, "b_before": before, "b_limit": limit}
        return await self.all(AuditEntry, _AUDIT_TO_EXPORT, params)

    async def count_to_export(self, *, after_id: str, before: int) -> int:
        params = {"b_after": after_id, "b_before": before}
        return int(await self.scalar(_AUDIT_TO_EXPORT_COUNT, params))

    async def prune(self, *, upto_id: str, before: int) -> int:
        """Delete entries up to `upto_id` (exported) written before `before`."""
        return len(await self.run(_AUDIT_PRUNE, {"b_upto": upto_id, "b_before": before}))


class SettingsRepository(Repository):
    async def all_values(self) -> dict[str, str]:
        return {key: value for key, value in await self.rows(_SETTINGS_ALL)}

    async def put(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            await self.run(_SETTINGS_PUT[self.kind], {"key": key, "value": value})

    async def get(self, key: str) -> str | None:
        value = await self.scalar(_SETTINGS_GET, {"b_key": key})
        return None if value is None else str(value)

    async def advance(self, key: str, value: str) -> None:
        """Set `key` to `value` unless it already holds a greater one (a checkpoint)."""
        await self.run(_SETTINGS_ADVANCE[self.kind], {"key": key, "value": value})

    async def swap(self, key: str, old: str, new: str) -> None:
        """Set `key` to `new` only if it still holds `old` (compare-and-set)."""
        await self.run(_SETTINGS_SWAP, {"b_key": key, "b_old": old, "value": new})
