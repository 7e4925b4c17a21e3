"""SQL for task graphs (docs/graphs.md): the edges (`task_dependencies`), a dependency's end
passed on to the tasks that wait for it, and the graph around a task.

Each change to a waiting task is one compare-and-set UPDATE on its row (status `blocked`), so on
PostgreSQL two transactions that end two dependencies of one task meet on its row lock: the
second re-reads the row the first committed (READ COMMITTED's recheck) and counts from there.
An edge is `settled` once, in the transaction that ended its dependency as the task needs, so a
dependency requeued and ended again is never counted twice."""

from typing import Any

from sqlalchemy import (
    String,
    and_,
    bindparam,
    case,
    func,
    literal,
    not_,
    or_,
    select,
    true,
    update,
)

from bloom.db.repository import Repository, is_state, text_rows
from bloom.domain.graph import Answer, PassedArtifact
from bloom.runtime.storage.tables import (
    llm_results,
    llm_tasks,
    runtime_artifacts,
    task_dependencies,
)

t = llm_tasks
d = task_dependencies
a = runtime_artifacts

_UNSETTLED_OF = (
    select(d.c.task_id).where(d.c.depends_on == bindparam("b_dependency"), not_(d.c.settled))
).scalar_subquery()
_RUNS_ANYWAY = t.c.on_dependency_failure == literal("run", String())


def _released(only_run: bool, waiting: Any = _UNSETTLED_OF) -> Any:
    """One wait of each blocked task among `waiting` (by default those waiting, unsettled, on
    `b_dependency`) counted off; the ones whose count reaches 0 queued. Answers each task
    changed: id, status."""
    last = t.c.waiting_on <= 1
    where = [is_state(t.c.status, "blocked"), t.c.id.in_(waiting)]
    if only_run:
        where.append(_RUNS_ANYWAY)
    return (
        update(t)
        .where(*where)
        .values(
            waiting_on=t.c.waiting_on - 1,
            status=case((last, literal("queued", String())), else_=t.c.status),
            queued_at=case((last, bindparam("b_now")), else_=t.c.queued_at),
            updated_at=bindparam("b_now"),
        )
        .returning(t.c.id, t.c.status)
    )


def _settle(only_run: bool) -> Any:
    where = [d.c.depends_on == bindparam("b_dependency"), not_(d.c.settled)]
    if only_run:
        runs = select(t.c.id).where(t.c.id == d.c.task_id, _RUNS_ANYWAY).exists()
        where.append(runs)
    return update(d).where(*where).values(settled=true())


def _settled_and_released(only_run: bool) -> Any:
    """PostgreSQL: both in one statement, the edges settled in a data-modifying CTE and the
    tasks whose edge it settled counted off. The edges of one dependency are written by its own
    end only, so taking their locks first waits for no one (no new lock order)."""
    settled = _settle(only_run).returning(d.c.task_id).cte("settled")
    return _released(only_run, select(settled.c.task_id))


_RELEASE = _released(only_run=False)
_RELEASE_RUNNING_ANYWAY = _released(only_run=True)
_SETTLE = _settle(only_run=False)
_SETTLE_RUNNING_ANYWAY = _settle(only_run=True)
_SETTLE_AND_RELEASE = {only_run: _settled_and_released(only_run) for only_run in (False, True)}

_CANCEL_WAITING = (
    update(t)
    .where(
        is_state(t.c.status, "blocked"),
        t.c.id.in_(_UNSETTLED_OF),
        or_(t.c.on_dependency_failure.is_(None), not_(_RUNS_ANYWAY)),
    )
    .values(
        status=literal("cancelled", String()),
        cancelled_for=bindparam("b_root"),
        last_error=bindparam("b_reason"),
        updated_at=bindparam("b_now"),
    )
    .returning(t.c.id, t.c.has_dependents)
)
"""The blocked tasks waiting on `b_dependency` that do not run anyway, cancelled for `b_root`
(the failed task it all comes from) with `b_reason`."""


def _restore() -> Any:
    """The tasks cancelled for `b_root` back to blocked, their waits counted again from their
    unsettled edges, unless another of their dependencies (not cancelled for the same root)
    ended unsuccessfully too."""
    mine = d.alias("mine")
    other = t.alias("other")
    failed_elsewhere = (
        select(mine.c.task_id)
        .join(other, other.c.id == mine.c.depends_on)
        .where(
            mine.c.task_id == t.c.id,
            not_(mine.c.settled),
            or_(
                is_state(other.c.status, "failed"),
                is_state(other.c.status, "dead"),
                and_(
                    is_state(other.c.status, "cancelled"),
                    func.coalesce(other.c.cancelled_for, "") != bindparam("b_root"),
                ),
            ),
            other.c.id != bindparam("b_root"),
        )
        .exists()
    )
    waits = (
        select(func.count())
        .select_from(mine)
        .where(mine.c.task_id == t.c.id, not_(mine.c.settled))
        .scalar_subquery()
    )
    return (
        update(t)
        .where(
            t.c.cancelled_for == bindparam("b_root"),
            is_state(t.c.status, "cancelled"),
            ~failed_elsewhere,
        )
        .values(
            status=literal("blocked", String()),
            cancelled_for=None,
            last_error=None,
            waiting_on=waits,
            updated_at=bindparam("b_now"),
        )
        .returning(t.c.id)
    )


_RESTORE = _restore()
_MARK_ONE = (
    update(t)
    .where(t.c.id == bindparam("b_id"))
    .values(has_dependents=true())
    .returning(t.c.id, t.c.status, t.c.last_error, t.c.workspace)
)


def _mark_several() -> Any:
    named = text_rows("named", id="b_ids")
    return (
        update(t)
        .where(t.c.id == named.c.id)
        .values(has_dependents=true())
        .returning(t.c.id, t.c.status, t.c.last_error, t.c.workspace)
    )


_MARK_SEVERAL = _mark_several()
_NODE_COLUMNS = (
    t.c.id,
    t.c.status,
    t.c.agent_slug,
    t.c.context_id,
    t.c.created_at,
    t.c.updated_at,
    t.c.dependencies,
    t.c.waiting_on,
    t.c.cancelled_for,
    d.c.ref,
    d.c.settled,
    d.c.with_artifacts,
)
_UPSTREAM = (
    select(*_NODE_COLUMNS)
    .join(t, t.c.id == d.c.depends_on)
    .where(d.c.task_id == bindparam("b_id"))
    .order_by(d.c.position)
)
_DOWNSTREAM = (
    select(*_NODE_COLUMNS)
    .join(t, t.c.id == d.c.task_id)
    .where(d.c.depends_on == bindparam("b_id"))
    .order_by(t.c.created_at, t.c.id)
    .limit(bindparam("b_limit"))
)


def _newest_success(column: Any) -> Any:
    """`column` of the newest successful result of the edge's dependency (the answer's)."""
    return (
        select(column)
        .where(llm_results.c.task_id == d.c.depends_on, is_state(llm_results.c.status, "success"))
        .order_by(llm_results.c.completed_at.desc())
        .limit(1)
        .correlate(d)
        .scalar_subquery()
    )


def _answers() -> Any:
    return (
        select(
            d.c.depends_on.label("task_id"),
            d.c.ref,
            d.c.with_artifacts,
            t.c.status,
            t.c.last_error.label("error"),
            _newest_success(func.substr(llm_results.c.output, 1, bindparam("b_chars"))).label(
                "output"
            ),
        )
        .join(t, t.c.id == d.c.depends_on)
        .where(d.c.task_id == bindparam("b_id"))
        .order_by(d.c.position)
    )


_ANSWERS = _answers()
_UPSTREAM_WORKSPACES = (
    select(t.c.id, t.c.workspace)
    .join(t, t.c.id == d.c.depends_on)
    .where(d.c.task_id == bindparam("b_id"), t.c.workspace_key.is_not(None))
    .order_by(d.c.position)
)
_ASKED_RESULTS = (
    select(d.c.depends_on, llm_results.c.artifact_id, llm_results.c.workspace)
    .select_from(d)
    .join(llm_results, llm_results.c.id == _newest_success(llm_results.c.id))
    .where(d.c.task_id == bindparam("b_id"), d.c.with_artifacts)
)
"""The answers' results of the dependencies whose artifacts `b_id` asked for."""
_ARTIFACT_COLUMNS = (
    a.c.id,
    a.c.type,
    a.c.size_bytes,
    func.substr(a.c.content, 1, bindparam("b_chars")).label("content"),
)
_ARTIFACT_ONE = select(*_ARTIFACT_COLUMNS).where(a.c.id == bindparam("b_id"))


def _artifacts_several() -> Any:
    named = text_rows("named", id="b_ids")
    return select(*_ARTIFACT_COLUMNS).join(named, a.c.id == named.c.id)


_ARTIFACTS_SEVERAL = _artifacts_several()


class GraphRepository(Repository):
    def __init__(self, connection: Any):
        super().__init__(connection)
        self.released: list[str] = []
        """The tasks this transaction queued by ending their last dependency (to wake for)."""

    async def mark_dependents(
        self, task_ids: list[str]
    ) -> dict[str, tuple[str, str | None, dict[str, Any] | None]]:
        """Flag these tasks as having dependents (locking their rows, in id order, to the end of
        the transaction: a complete of one of them waits, or has committed and is seen); each
        found one's status, last error and workspace, by id."""
        ordered = sorted(set(task_ids))
        if self.is_postgres and len(ordered) > 1:
            rows = await self.run(_MARK_SEVERAL, {"b_ids": ordered})
        else:
            rows = []
            for task_id in ordered:
                rows += await self.run(_MARK_ONE, {"b_id": task_id})
        return {row["id"]: (row["status"], row["last_error"], row["workspace"]) for row in rows}

    async def insert_edges(self, rows: list[dict[str, Any]]) -> None:
        """The edges (task_id, depends_on, position, ref, settled), inserted with the
        transaction's next statement on their table, or its commit."""
        for row in rows:
            self.append_row(d, row)

    async def release(self, dependency_id: str, now: int, *, only_run: bool) -> list[str]:
        """`dependency_id` ended as its waiting tasks need (completed; with `only_run`, failed,
        for the tasks that run anyway): each counts one wait off, its edge settled. The tasks
        it queued (their last wait), by id."""
        params = {"b_dependency": dependency_id, "b_now": now}
        if self.is_postgres:  # one statement, one round trip
            changed = await self.run(_SETTLE_AND_RELEASE[only_run], params)
        else:
            changed = await self.run(_RELEASE_RUNNING_ANYWAY if only_run else _RELEASE, params)
            await self.run(_SETTLE_RUNNING_ANYWAY if only_run else _SETTLE, params)
        queued = [row["id"] for row in changed if row["status"] == "queued"]
        self.released += queued
        return queued

    async def cancel_waiting(
        self, dependency_id: str, root: str, reason: str, now: int
    ) -> list[tuple[str, bool]]:
        """The blocked tasks waiting on `dependency_id` that do not run anyway, cancelled for
        `root`: each one's id and whether tasks depend on it in turn."""
        params = {"b_dependency": dependency_id, "b_root": root, "b_reason": reason, "b_now": now}
        rows = await self.run(_CANCEL_WAITING, params)
        return [(row["id"], bool(row["has_dependents"])) for row in rows]

    async def restore(self, root: str, now: int) -> list[str]:
        """The tasks cancelled for `root` (requeued) blocked again: their ids."""
        rows = await self.run(_RESTORE, {"b_root": root, "b_now": now})
        return [row["id"] for row in rows]

    async def upstream(self, task_id: str) -> list[dict[str, Any]]:
        """The tasks `task_id` depends on, in the order it named them, each with its edge's ref
        and whether it is settled."""
        return [dict(row) for row in await self.run(_UPSTREAM, {"b_id": task_id})]

    async def downstream(self, task_id: str, limit: int) -> list[dict[str, Any]]:
        """The tasks that depend on `task_id`, oldest first, at most `limit`."""
        rows = await self.run(_DOWNSTREAM, {"b_id": task_id, "b_limit": limit})
        return [dict(row) for row in rows]

    async def upstream_workspaces(self, task_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The workspace tasks `task_id` depends on, in the order it named them: (id, workspace)."""
        rows = await self.run(_UPSTREAM_WORKSPACES, {"b_id": task_id})
        return [(row["id"], row["workspace"]) for row in rows]

    async def answers(self, task_id: str, chars: int) -> list[Answer]:
        """What each of `task_id`'s dependencies left for it, in the order it named them: the
        first `chars` characters of its newest successful result's output (`read_short` when
        there may be more) and, where it asked for them, that result's artifacts (its output's
        and its patch), with the first `chars` characters of what the database holds of each."""
        rows = await self.run(_ANSWERS, {"b_id": task_id, "b_chars": chars})
        asked = any(row["with_artifacts"] for row in rows)
        artifacts = await self._artifacts_of(task_id, chars) if asked else {}
        return [
            Answer(
                task_id=row["task_id"],
                ref=row["ref"],
                status=row["status"],
                output=row["output"],
                error=row["error"],
                read_short=row["output"] is not None and len(row["output"]) >= chars,
                with_artifacts=bool(row["with_artifacts"]),
                artifacts=artifacts.get(row["task_id"], ()),
            )
            for row in rows
        ]

    async def _artifacts_of(
        self, task_id: str, chars: int
    ) -> dict[str, tuple[PassedArtifact, ...]]:
        """The artifacts of the answers `task_id` asked them of, by dependency: its output's,
        then its patch (a workspace's change)."""
        wanted: dict[str, list[tuple[str, bool]]] = {}
        for row in await self.run(_ASKED_RESULTS, {"b_id": task_id}):
            patch = (row["workspace"] or {}).get("patch_artifact_id")
            named = [(row["artifact_id"], True), (patch, False)]
            wanted[row["depends_on"]] = [(str(id_), answer) for id_, answer in named if id_]
        ids = sorted({id_ for named in wanted.values() for id_, _ in named})
        if self.is_postgres and len(ids) > 1:
            rows = await self.run(_ARTIFACTS_SEVERAL, {"b_ids": ids, "b_chars": chars})
        else:
            rows = []
            for id_ in ids:
                rows += await self.run(_ARTIFACT_ONE, {"b_id": id_, "b_chars": chars})
        found = {row["id"]: row for row in rows}
        return {
            dependency: tuple(
                PassedArtifact(
                    id=id_,
                    type=found[id_]["type"],
                    size_bytes=found[id_]["size_bytes"],
                    content=found[id_]["content"],  # None: kept outside the database
                    is_answer=is_answer,
                )
                for id_, is_answer in named
                if id_ in found
            )
            for dependency, named in wanted.items()
        }
