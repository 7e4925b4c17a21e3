"""The dashboard's pages: thin GET routes that read through the services and render a template.

Every page has a stable URL (filters in the query string) and may be asked for one of its parts
(`?part=NAME`), which is how its live regions refresh themselves.
"""

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from bloom.domain.audit import ENTITY_TYPES, AuditAction
from bloom.domain.clis import CLIS
from bloom.domain.errors import BadGateway, NotFound, ServiceError
from bloom.domain.identity import Role
from bloom.domain.models import Artifact, Result
from bloom.domain.paging import Cursor
from bloom.domain.secrets import last_four
from bloom.domain.states import TaskStatus, WorkerStatus
from bloom.domain.usage import UsageGroup
from bloom.domain.workspace import PATCH_ARTIFACT
from bloom.runtime.container import Container
from bloom.runtime.dashboard import charts, present
from bloom.runtime.dashboard.diffs import change_of
from bloom.runtime.dashboard.templating import render, viewer_of
from bloom.runtime.services.records import AuditFilter
from bloom.runtime.services.tasks import TaskFilter

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
INLINE_BYTES = 64 * 1024
MAX_PATCH_SHOWN_BYTES = 512 * 1024
"""How much of a change's patch the task page reads (the rest: its download)."""
"""An artifact's content shown inline up to this much; the rest is a download."""
EXPORT_MAX = 100_000
EXPORT_PAGE = 500
WINDOWS = {"hour": (3_600_000, 60_000), "day": (86_400_000, 900_000)}
COST_ROWS = 8
"""Projects listed in the overview's cost today (the costliest)."""
DECIDED_ROWS = 30
"""Decisions the approvals page lists."""
LIVE = frozenset(
    {
        TaskStatus.BLOCKED,
        TaskStatus.QUEUED,
        TaskStatus.LEASED,
        TaskStatus.RUNNING,
        TaskStatus.AWAITING_APPROVAL,
    }
)

Part = Annotated[str | None, Query(max_length=40)]
Text = Annotated[str | None, Query(max_length=200)]


def _container(request: Request) -> Container:
    built: Container = request.app.state.container
    return built


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


# ---- overview ----


@router.get("/")
async def overview(request: Request, part: Part = None, window: Text = "hour") -> HTMLResponse:
    c = _container(request)
    chosen = window if window in WINDOWS else "hour"
    window_ms, bucket_ms = WINDOWS[chosen]
    summary = await c.history.overview(window_ms=window_ms, bucket_ms=bucket_ms)
    recent = await c.tasks.page(TaskFilter(), after=None, limit=8)
    cost = await c.usage.today(UsageGroup.PROJECT, limit=COST_ROWS)
    cost_by_cli = await c.usage.today(UsageGroup.CLI, limit=COST_ROWS)
    now = c.clock()
    context = {
        "cost": cost,
        "cost_by_cli": cost_by_cli,
        "o": summary,
        "window": chosen,
        "windows": list(WINDOWS),
        "throughput": charts.throughput(summary),
        "depth": charts.depth(summary, now),
        "recent": recent.items,
    }
    return render(
        request, "overview.html", context, now=now, part=part, parts=frozenset({"overview_body"})
    )


# ---- tasks ----


@router.get("/tasks")
async def tasks_page(
    request: Request,
    part: Part = None,
    status: Text = None,
    worker: Text = None,
    context: Text = None,
    agent: Text = None,
    cli: Text = None,
    q: Text = None,
    after: Text = None,
) -> HTMLResponse:
    c = _container(request)
    chosen = TaskStatus(status) if status in set(TaskStatus) else None
    found = TaskFilter(
        status=chosen,
        worker_id=_blank(worker),
        context_id=_blank(context),
        agent_slug=_blank(agent),
        cli=cli if cli in CLIS else None,
        text=_blank(q),
    )
    cursor = Cursor.decode(after) if after else None
    page = await c.tasks.page(found, after=cursor, limit=PAGE_SIZE)
    counts = await c.tasks.counts()
    workers = await c.workers.find()
    now = c.clock()
    query = {
        key: value
        for key, value in {
            "status": chosen.value if chosen else None,
            "worker": found.worker_id,
            "context": found.context_id,
            "agent": found.agent_slug,
            "cli": found.cli,
            "q": found.text,
        }.items()
        if value
    }
    context_ = {
        "tasks": page.items,
        "next_cursor": page.next.encode() if page.next else None,
        "page_size": PAGE_SIZE,
        "search_window": c.tasks.search_window,
        "paged": cursor is not None,
        "filters": query,
        "statuses": [s.value for s in TaskStatus],
        "clis": CLIS,
        "counts": counts,
        "total": sum(counts.values()),
        "online": sum(1 for w in workers if w.status is WorkerStatus.ONLINE),
        "dispatchable": any(w.url and w.status is WorkerStatus.ONLINE for w in workers),
        "holds": await c.budgets.holds(),
        "default_context": f"ctx-{now}",
        "stall_sec": c.settings.stall_sec,
    }
    return render(
        request, "tasks.html", context_, now=now, part=part, parts=frozenset({"task_rows"})
    )


@router.get("/tasks/{task_id}")
async def task_page(request: Request, task_id: str, part: Part = None) -> HTMLResponse:
    c = _container(request)
    try:
        task = await c.tasks.get(task_id)
    except NotFound:
        return _error_page(
            request,
            c,
            404,
            "No such task",
            f"There is no task '{task_id}'. It may have been mistyped.",
        )
    attempts = await c.records.attempts(task_id)
    results = await c.records.results(task_id)
    artifacts = await c.records.artifacts(task_id=task_id, limit=50)
    patches = {a.id: a for a in artifacts if a.type == PATCH_ARTIFACT}
    timeline = await c.records.audit(limit=200, task_id=task_id)
    holds = await c.budgets.holds() if task.status is TaskStatus.QUEUED else {}
    context = {
        "task": task,
        "hold": holds.get(task.agent_slug),
        "waiting": await c.workspaces.waiting_for(task),
        "live": task.status in LIVE,
        "policy": present.policy_items(task.policy),
        "attempts": attempts,
        "stall": await c.records.stall(task),
        "results": results,
        "result_by_lease": {r.lease_id: r for r in results if r.lease_id},
        "artifacts": [(a, None if a.id in patches else await _inline(c, a)) for a in artifacts],
        "change": change_of(results, await _patch_text(c, results, patches)),
        "timeline": [e for e in reversed(timeline) if e.action != AuditAction.TOOL_CALL],
        "tool_calls": [e for e in reversed(timeline) if e.action == AuditAction.TOOL_CALL],
        "can_cancel": task.status in LIVE,
        "can_requeue": task.status in (TaskStatus.FAILED, TaskStatus.DEAD),
        "graph": (
            await c.graphs.graph(task_id) if task.dependencies or task.has_dependents else None
        ),
    }
    parts = frozenset({"task_detail", "task_record"})
    return render(request, "task.html", context, now=c.clock(), part=part, parts=parts)


async def _patch_text(
    c: Container, results: list[Result], patches: dict[str, Artifact]
) -> str | None:
    """The newest change's patch, as much of it as the page shows."""
    for result in reversed(results):
        found = patches.get((result.workspace or {}).get("patch_artifact_id") or "")
        if found is not None:
            return await _inline(c, found, MAX_PATCH_SHOWN_BYTES)
    return None


async def _inline(c: Container, artifact: Artifact, limit: int = INLINE_BYTES) -> str | None:
    """The start of an artifact's content for the page (JSON pretty-printed), None if it cannot
    be read now (the download link says why)."""
    try:
        content = await c.records.artifact_content(artifact.id)
        if content.size == 0:
            return ""
        last = min(content.size, limit) - 1
        chunks = await content.open(0, last)
        raw = b"".join([chunk async for chunk in chunks])
    except ServiceError as exc:  # missing, or its store is down: the page still renders
        return f"({exc.message})"
    text = raw.decode("utf-8", errors="replace")
    if content.media_type == "application/json" and content.size <= INLINE_BYTES:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


# ---- workers ----


@router.get("/workers")
async def workers_page(request: Request, part: Part = None) -> HTMLResponse:
    c = _container(request)
    workers = await c.workers.find()
    leases = await c.records.leases(status="active", limit=200)
    context = {
        "workers": workers,
        "leases": leases,
        "online": sum(1 for w in workers if w.status is WorkerStatus.ONLINE),
        "public_url": (c.settings.public_url or "").rstrip("/"),
    }
    return render(
        request,
        "workers.html",
        context,
        now=c.clock(),
        part=part,
        parts=frozenset({"worker_stats", "worker_rows", "lease_rows"}),
    )


# ---- membridge ----


@router.get("/membridge")
async def membridge_page(request: Request, part: Part = None, project: Text = None) -> HTMLResponse:
    c = _container(request)
    config = await c.config.get()
    projects, problem = await _forwarded(c, "/projects")
    chosen = _blank(project)
    leadership: Any = None
    nodes: Any = None
    if chosen and problem is None:
        leadership, problem = await _forwarded(c, f"/projects/{quote(chosen, safe='')}/leadership")
        nodes, node_problem = await _forwarded(c, f"/projects/{quote(chosen, safe='')}/nodes")
        problem = problem or node_problem
    context = {
        "config": config,
        "admin_key_shown": last_four(config.admin_key_masked),
        "projects": projects if isinstance(projects, list) else [],
        "problem": problem,
        "chosen": chosen,
        "leadership": leadership if isinstance(leadership, dict) else None,
        "nodes": nodes if isinstance(nodes, list) else [],
    }
    return render(
        request,
        "membridge.html",
        context,
        now=c.clock(),
        part=part,
        parts=frozenset({"membridge_projects", "membridge_project"}),
    )


async def _forwarded(c: Container, path: str) -> tuple[Any, str | None]:
    """Membridge's answer, or None and why it could not be had."""
    try:
        answer = await c.membridge.forward("GET", path)
    except BadGateway as exc:
        return None, exc.message
    if answer.status >= 400:
        body = answer.body if isinstance(answer.body, dict) else {}
        return None, str(body.get("error") or f"Membridge returned {answer.status}")
    return answer.body, None


# ---- projects ----


@router.get("/projects")
async def projects_page(request: Request, part: Part = None) -> HTMLResponse:
    c = _container(request)
    context = {
        "projects": await c.projects.find(),
        "nodes": [worker for worker in await c.workers.find() if worker.url],
    }
    return render(
        request,
        "projects.html",
        context,
        now=c.clock(),
        part=part,
        parts=frozenset({"project_rows"}),
    )


# ---- audit ----


def _audit_filter(
    action: str | None, entity_type: str | None, actor: str | None, entity: str | None
) -> AuditFilter:
    return AuditFilter(
        action=_blank(action),
        entity_type=_blank(entity_type),
        actor=_blank(actor),
        entity_id=_blank(entity),
    )


@router.get("/approvals")
async def approvals_page(request: Request, part: Part = None) -> HTMLResponse:
    """Calls waiting for a person (Approve / Deny), and the latest decisions; its
    `approvals_badge` part is the navigation's count, on every page."""
    c = _container(request)
    if part == "approvals_badge":
        context: dict[str, Any] = {"pending_count": await c.approvals.pending_count()}
    else:
        pending = await c.approvals.find(status="pending", limit=100)
        recent = await c.approvals.find(limit=DECIDED_ROWS + len(pending))
        context = {
            "pending": [approval.to_json() for approval in pending],
            "decided": [a.to_json() for a in recent if a.status != "pending"][:DECIDED_ROWS],
            "can_decide": viewer_of(request).role in (Role.ADMIN, Role.APPROVER),
        }
    return render(
        request,
        "approvals.html",
        context,
        now=c.clock(),
        part=part,
        parts=frozenset({"approval_rows", "decided_rows", "approvals_badge"}),
    )


@router.get("/audit")
async def audit_page(
    request: Request,
    part: Part = None,
    action: Text = None,
    entity_type: Text = None,
    actor: Text = None,
    entity: Text = None,
    after: Text = None,
) -> HTMLResponse:
    c = _container(request)
    found = _audit_filter(action, entity_type, actor, entity)
    cursor = Cursor.decode(after) if after else None
    page = await c.records.audit_page(found, after=cursor, limit=PAGE_SIZE)
    query = {
        key: value
        for key, value in {
            "action": found.action,
            "entity_type": found.entity_type,
            "actor": found.actor,
            "entity": found.entity_id,
        }.items()
        if value
    }
    context = {
        "entries": page.items,
        "next_cursor": page.next.encode() if page.next else None,
        "paged": cursor is not None,
        "filters": query,
        "actions": sorted(action.value for action in AuditAction),
        "entity_types": ENTITY_TYPES,
    }
    return render(
        request, "audit.html", context, now=c.clock(), part=part, parts=frozenset({"audit_rows"})
    )


@router.get("/audit/export.jsonl")
async def audit_export(
    request: Request,
    action: Text = None,
    entity_type: Text = None,
    actor: Text = None,
    entity: Text = None,
) -> StreamingResponse:
    """The entries the audit page's filters select, as JSON lines, newest first."""
    c = _container(request)
    found = _audit_filter(action, entity_type, actor, entity)

    async def lines() -> AsyncIterator[bytes]:
        cursor: Cursor | None = None
        sent = 0
        while sent < EXPORT_MAX:
            page = await c.records.audit_page(found, after=cursor, limit=EXPORT_PAGE)
            for entry in page.items:
                yield orjson.dumps(entry) + b"\n"
            sent += len(page.items)
            if page.next is None:
                return
            cursor = page.next

    name = f"bloom-audit-{c.clock()}.jsonl"
    return StreamingResponse(
        lines(),
        media_type="application/x-ndjson",
        headers={
            "Content-Disposition": f'attachment; filename="{name}"',
            "Cache-Control": "no-store",
        },
    )


# ---- settings ----


@router.get("/settings")
async def settings_page(request: Request, part: Part = None) -> HTMLResponse:
    c = _container(request)
    context = {
        "keys": await c.credentials.keys(),
        "users": await c.credentials.users(),
        "roles": ["viewer", "approver", "worker", "admin"],
        "open_api": not c.settings.api_key_value,
        "open_to_network": c.settings.open_to_network,
    }
    return render(
        request,
        "settings.html",
        context,
        now=c.clock(),
        part=part,
        parts=frozenset({"key_rows", "user_rows"}),
    )


def _error_page(
    request: Request, c: Container, status: int, title: str, message: str
) -> HTMLResponse:
    return render(
        request, "error.html", {"title": title, "message": message}, now=c.clock(), status=status
    )
