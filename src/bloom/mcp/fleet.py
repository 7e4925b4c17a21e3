"""What the MCP tools do, over the runtime's typed client: each call one or two API calls, its
answer a small JSON-able object a model reads well. No secret is ever part of an answer (the
runtime masks them; nothing here reads keys)."""

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable, TaskEvent
from bloom.clients.wire import ArtifactInfo, TaskInfo, WorkerInfo, answers
from bloom.domain.budget import utc_minute
from bloom.domain.states import TERMINAL, WorkerStatus

INLINE_CHARS = 20_000
"""An artifact up to this long comes back inline; a longer one as a link to its resource."""
MAX_WAIT_SEC = 3_600
POLL_SEC = 1.0
PROGRESS_CHARS = 400
COST_ROWS = 10
"""Projects named in fleet_status's cost today (the costliest)."""
"""Live output is passed on as progress messages, each cut to this length."""

Progress = Callable[[float, str], Awaitable[None]]
"""Told (how many events so far, a line saying what happened)."""


def task_view(task: TaskInfo) -> dict[str, Any]:
    """A task as a model needs it: what, where, how far, and why it stopped."""
    view: dict[str, Any] = {
        "id": task.id,
        "status": str(task.status),
        "context_id": task.context_id,
        "agent_slug": task.agent_slug,
        "prompt": task.prompt if len(task.prompt) <= 500 else task.prompt[:500] + "…",
        "priority": task.priority,
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "worker_id": task.worker_id,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
    }
    if task.last_error:
        view["last_error"] = task.last_error
    dependencies = task.raw.get("dependencies")
    if dependencies:
        view["dependencies"] = dependencies
        view["waiting_on"] = task.raw.get("waiting_on", 0)
    if task.cancel_requested:
        view["cancel_requested"] = True
    if task.hold is not None:
        view["waiting"] = (
            f"project {task.hold.project} has spent its budget; queued until "
            f"{utc_minute(task.hold.until)}"
        )
    if task.workspace is not None:
        view["workspace"] = {"repo": task.workspace.repo, "branch": task.workspace.branch}
    if task.stall is not None:
        view["stalled"] = (
            f"no output since {utc_minute(task.stall.silent_since)} on worker "
            f"{task.stall.worker_id}, though it heartbeats"
        )
    return view


CHANGE_FIELDS = frozenset(
    {"base", "head", "branch", "pushed", "push_error", "files_changed", "insertions", "deletions"}
)


def artifact_uri(artifact_id: str) -> str:
    return f"bloom://artifacts/{artifact_id}"


@dataclass(frozen=True, slots=True)
class Output:
    """A task's answer: its text when short enough, else where to read it."""

    artifact: ArtifactInfo
    text: str | None
    size_bytes: int

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"artifact_id": self.artifact.id, "type": self.artifact.type}
        if self.text is not None:
            return out | {"output": self.text}
        return out | {"output_uri": artifact_uri(self.artifact.id), "output_bytes": self.size_bytes}


class Fleet:
    """The runtime as the MCP tools see it."""

    def __init__(self, client: RuntimeClient):
        self.client = client

    async def submit(
        self,
        prompt: str,
        *,
        context_id: str | None,
        agent_slug: str,
        priority: int | None,
        timeout_sec: int | None,
        budget_usd: float | None,
        idempotency_key: str | None,
        depends_on: list[str] | None = None,
        on_dependency_failure: str | None = None,
        cli: str | None = None,
        dependency_artifacts: list[str] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt,
            "context_id": context_id or f"mcp-{uuid.uuid4().hex[:12]}",
            "agent_slug": agent_slug,
        }
        policy = {
            name: value
            for name, value in (("timeout_sec", timeout_sec), ("budget", budget_usd))
            if value is not None
        }
        if policy:
            body["policy"] = policy
        if priority is not None:
            body["priority"] = priority
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        if depends_on:
            body["depends_on"] = list(depends_on)
        if on_dependency_failure:
            body["on_dependency_failure"] = on_dependency_failure
        if dependency_artifacts:
            body["dependency_artifacts"] = list(dependency_artifacts)
        if cli is not None:
            body["cli"] = cli
        return task_view(await self.client.create_task(body))

    async def submit_graph(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A whole graph in one batch (all or none): each item a task body (`prompt`, and
        optionally `ref`, `depends_on`, `dependency_artifacts`, `context_id`, `agent_slug`,
        `on_dependency_failure`, `priority`); a fresh context for each that names none."""
        bodies: list[Mapping[str, Any]] = [
            {"context_id": f"mcp-{uuid.uuid4().hex[:12]}", "agent_slug": "default"} | task
            for task in tasks
        ]
        return [task_view(task) for task in await self.client.create_tasks(bodies)]

    async def task(self, task_id: str) -> dict[str, Any]:
        task = await self.client.get_task(task_id)
        view = task_view(task)
        if task.status in TERMINAL:
            output = await self.output(task_id)
            if output is not None:
                view |= output.as_json()
            if task.workspace is not None:
                view["change"] = await self.change(task_id)
        return view

    async def change(self, task_id: str) -> dict[str, Any] | None:
        """What the task did to its branch (None: no change), its patch as a resource."""
        history = await self.client.workspace_history(task_id, patches=False)
        for step in history.get("steps") or []:
            if step.get("task_id") == task_id:
                shown = {k: v for k, v in step.items() if k in CHANGE_FIELDS}
                patch = step.get("patch_artifact_id")
                return shown | ({"patch_uri": artifact_uri(patch)} if patch else {})
        return None

    async def tasks(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return [task_view(t) for t in await self.client.list_tasks(status=status, limit=limit)]

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return task_view(await self.client.cancel_task(task_id))

    async def output(self, task_id: str) -> Output | None:
        """The task's newest answer artifact, inline when short."""
        artifacts = answers(await self.client.artifacts(task_id))
        if not artifacts:
            return None
        return await self.artifact(artifacts[0])

    async def artifact(self, artifact: ArtifactInfo) -> Output:
        """Its content when short; a large one is not even downloaded (its stored size says so:
        more bytes than four per character inline)."""
        stored = artifact.raw.get("size_bytes")
        if isinstance(stored, int) and stored > 4 * INLINE_CHARS:
            return Output(artifact, None, stored)
        text = await self.client.artifact_content(artifact.id)
        size = len(text.encode())
        return Output(artifact, text if len(text) <= INLINE_CHARS else None, size)

    async def artifact_by_id(self, artifact_id: str) -> Output:
        return await self.artifact(await self.client.artifact(artifact_id))

    async def wait(self, task_id: str, timeout_sec: float, progress: Progress) -> dict[str, Any]:
        """Follow the task's live output (as progress) until it ends or `timeout_sec` passes;
        the task then, with its output once it has ended."""
        budget = min(timeout_sec, MAX_WAIT_SEC)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(budget):
                await self._follow(task_id, progress, time.monotonic() + budget)
        view = await self.task(task_id)
        view["done"] = view["status"] in {str(s) for s in TERMINAL}
        if not view["done"]:
            view["note"] = "still in progress: call wait_task again to keep waiting"
        return view

    async def _follow(self, task_id: str, progress: Progress, deadline: float) -> None:
        seen = 0
        try:
            async for event in self.client.events(task_id):
                seen += 1
                line = describe(event)
                if line:
                    await progress(seen, line)
                if event.type == "end":
                    return
        except RuntimeUnreachable:
            pass  # the stream broke: polling tells when the task has ended
        except RuntimeApiError as exc:
            if exc.status != 429:
                raise
            # this caller follows as many streams as the runtime allows: polling it is
        while time.monotonic() < deadline:
            if (await self.client.get_task(task_id)).status in TERMINAL:
                return
            await asyncio.sleep(POLL_SEC)

    async def workers(self) -> list[dict[str, Any]]:
        return [worker_view(w) for w in await self.client.list_workers()]

    async def status(self) -> dict[str, Any]:
        stats = await self.client.stats()
        workers = await self.client.list_workers()
        today = await self.client.usage("project", since=None, until=None, limit=COST_ROWS)
        online = [w for w in workers if w.status is WorkerStatus.ONLINE]
        counts = stats.get("tasks")
        tasks: dict[str, Any] = dict(counts) if isinstance(counts, dict) else {}
        return {
            "queued": tasks.get("queued", 0),
            "in_flight": tasks.get("leased", 0) + tasks.get("running", 0),
            "tasks_by_status": tasks,
            "workers_online": len(online),
            "workers_total": len(workers),
            "free_slots": sum(free_slots(w) for w in online),
            "cost_today_usd": today["total"]["cost_usd"],
            "cost_today_by_project": {g["key"]: g["cost_usd"] for g in today["groups"]},
        }


def worker_view(worker: WorkerInfo) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": worker.id,
        "status": str(worker.status),
        "active_leases": worker.active_leases,
        "max_concurrency": max_concurrency(worker),
        "last_heartbeat": worker.last_heartbeat,
    }
    if worker.labels:
        view["labels"] = list(worker.labels)
    if worker.paused_until:
        view["paused_until"] = worker.paused_until
    return view


def max_concurrency(worker: WorkerInfo) -> int:
    value = worker.capabilities.get("max_concurrency", 1)
    return value if isinstance(value, int) and value > 0 else 1


def free_slots(worker: WorkerInfo) -> int:
    return max(0, max_concurrency(worker) - worker.active_leases)


def describe(event: TaskEvent) -> str | None:
    """One event of a task's stream as a progress line, or None for what says nothing."""
    data = event.data if isinstance(event.data, dict) else {}
    if event.type == "started":
        return f"started on {data.get('worker_id') or '?'}, attempt {data.get('attempt') or '?'}"
    if event.type == "finished":
        return f"run finished: {data.get('status') or '?'}"
    if event.type == "end":
        return f"task {data.get('status') or 'ended'}"
    if event.type == "claude" and data.get("type") == "assistant":
        message = data.get("message")
        blocks = message.get("content") if isinstance(message, dict) else None
        texts = [
            str(b.get("text", "")).strip()
            for b in (blocks if isinstance(blocks, list) else [])
            if isinstance(b, dict) and b.get("type") == "text"
        ]
        text = " ".join(t for t in texts if t)
        return text[:PROGRESS_CHARS] if text else None
    return None
