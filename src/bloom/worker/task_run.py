"""One leased task on this worker: run the CLI, keep the lease alive, forward its events, and
report the outcome (retried until the runtime has it).

The lease is the fence: when a heartbeat or an event post is refused (the lease expired, was
replaced, or the task is gone) the CLI is killed and nothing is reported, because another worker
may own the task by now.
"""

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable
from bloom.clients.wire import Grant, HeartbeatReply, HeartbeatRequest
from bloom.domain.retry import ErrorCode
from bloom.worker import metrics
from bloom.worker.claude import ClaudeProcess, Invocation, known_agent
from bloom.worker.claude_env import child_environment
from bloom.worker.conversations import ConversationBook
from bloom.worker.outcome import Outcome, RunReport, decide
from bloom.worker.prompt import build_prompt, resolve_hints
from bloom.worker.settings import WorkerSettings
from bloom.worker.workspace import Author, Prepared, WorkspaceFailed, Workspaces

T = TypeVar("T")

log = structlog.get_logger("bloom.worker")

FLUSH_SEC = 0.5
MAX_BATCH = 500
MAX_BATCH_BYTES = 1024 * 1024
"""Well under the runtime's request body limit (BLOOM_MAX_BODY_BYTES, 5 MiB by default)."""
MAX_EVENT_BYTES = 60 * 1024
MAX_BUFFERED = 5000
NO_CONVERSATION = "No conversation found"
USAGE_LIMIT_FALLBACK_MS = 60 * 60 * 1000
GIVEN_BACK_DELAY_MS = 1000
"""A task given back for an authentication failure (BLOOM_WORKER_ON_AUTH_FAILURE=wait) may run
again after this, on a worker whose credentials work."""
GIVEN_BACK = " The task was given back to the queue (BLOOM_WORKER_ON_AUTH_FAILURE=wait)."
PERMISSIONS_SET = frozenset({"--permission-mode", "--dangerously-skip-permissions"})
"""Arguments by which BLOOM_CLAUDE_ARGS decides what a run may do without asking."""
FENCED = frozenset({403, 404, 409})
"""Answers that mean the lease is not (or no longer) this worker's."""


class LeaseLost(Exception):
    """The runtime refused the lease: this worker must stop working on the task."""


@dataclass(slots=True)
class Pause:
    """Epoch ms before which this worker takes no work (a usage limit's reset)."""

    until_ms: int = 0

    def remaining_sec(self) -> float:
        return max(0.0, self.until_ms / 1000 - time.time())


def _bounded(kind: str, data: Any) -> dict[str, Any]:
    """An event small enough for the runtime; a huge one keeps its kind and a preview."""
    text = json.dumps(data, default=str)
    if len(text) <= MAX_EVENT_BYTES:
        return {"type": kind, "data": data}
    inner = data.get("type") if isinstance(data, dict) else None
    return {"type": kind, "data": {"type": inner, "truncated": True, "preview": text[:4000]}}


class EventOutbox:
    """Events waiting to be posted, in order; kept across a runtime outage, within a bound."""

    def __init__(self, client: RuntimeClient, task_id: str, lease_id: str, worker_id: str):
        self.client = client
        self.ids = (task_id, lease_id, worker_id)
        self.pending: list[dict[str, Any]] = []
        self.dropped = 0

    async def add(self, kind: str, data: Any) -> None:
        if len(self.pending) >= MAX_BUFFERED:
            self.pending.pop(0)
            self.dropped += 1
        self.pending.append(_bounded(kind, data))

    async def flush(self) -> None:
        """Post what is pending; raises LeaseLost when the runtime refuses the lease."""
        while self.pending:
            batch = _batch(self.pending)
            try:
                await self.client.send_events(*self.ids, batch)
            except RuntimeUnreachable:
                return  # kept; the next flush tries again
            except RuntimeApiError as exc:
                if exc.status in FENCED:
                    raise LeaseLost(exc.message) from None
                if exc.status >= 500:
                    return  # the runtime restarting (a proxy's 502, 503): kept, tried again
                log.warning("events_rejected", task_id=self.ids[0], error=exc.message)
            del self.pending[: len(batch)]


def _batch(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first events, at most MAX_BATCH of them and about MAX_BATCH_BYTES (at least one)."""
    size = 0
    for count, event in enumerate(pending[:MAX_BATCH]):
        size += len(json.dumps(event, default=str))
        if size > MAX_BATCH_BYTES and count:
            return pending[:count]
    return pending[:MAX_BATCH]


class TaskRun:
    def __init__(
        self,
        settings: WorkerSettings,
        client: RuntimeClient,
        conversations: ConversationBook,
        pause: Pause,
        grant: Grant,
        environ: Mapping[str, str] = os.environ,
        credentials_refused: Callable[[str], Awaitable[None]] | None = None,
    ):
        self.settings = settings
        self.credentials_refused = credentials_refused
        """Told (before the attempt is reported) when the CLI could not authenticate and the
        worker waits for its credentials instead of failing the task."""
        self.client = client
        self.conversations = conversations
        self.pause = pause
        self.task = grant.task
        self.lease = grant.lease
        self.environ = environ
        self.outbox = EventOutbox(client, self.task.id, self.lease.id, settings.name)
        self.workspaces = Workspaces(settings.workspaces_dir, Author(*settings.git_author_parts))
        self.cwd: Path | None = None
        """The workspace's worktree, where the CLI runs (None: a directory of the task's own)."""
        self.log = log.bind(task_id=self.task.id, lease_id=self.lease.id)

    async def run(self) -> None:
        task_id, context = self.task.id, self.task.context_id
        try:
            beat = await self._heartbeat()
        except LeaseLost as exc:
            self.log.warning("lease_lost_before_start", reason=str(exc))
            return
        if beat is not None and beat.cancel_requested:
            await self._report(
                Outcome(
                    False,
                    error_message="Cancelled before it started",
                    error_code=ErrorCode.CANCELLED,
                    metrics={"duration_ms": 0},
                )
            )
            return
        try:
            async with self.conversations.lock(context):
                prepared = await self._prepare_workspace()
                report = await self._execute(prepared)
                outcome = self._decide(report)
                if prepared is not None and outcome.success:
                    outcome = await self._keep_change(prepared, outcome)
        except LeaseLost as exc:
            self.log.warning("lease_lost", reason=str(exc))
            return
        except WorkspaceFailed as exc:
            self.log.warning("workspace_failed", error=str(exc))
            report = RunReport(exit_code=None, duration_ms=0, stderr_tail=str(exc))
            outcome = Outcome(
                False,
                error_message=f"Workspace: {exc}",
                error_code=ErrorCode.ERROR,
                metrics={"duration_ms": 0},
            )
        except asyncio.CancelledError:
            # The worker is stopping and the drain time is over: say so, so that the task is
            # retried now rather than when its lease runs out.
            outcome = Outcome(
                False,
                error_message="The worker stopped before the task ended",
                error_code=ErrorCode.ERROR,
                metrics={"duration_ms": 0},
            )
            await asyncio.shield(self._report(outcome, deadline_sec=5))
            raise
        if outcome.session_id and not report.timed_out:
            self.conversations.set(context, outcome.session_id)
        if outcome.error_code is ErrorCode.USAGE_LIMIT:
            until = outcome.retry_at or int(time.time() * 1000) + USAGE_LIMIT_FALLBACK_MS
            self.pause.until_ms = max(self.pause.until_ms, until)
            outcome = replace(outcome, retry_at=until)
        if outcome.error_code is ErrorCode.AUTH_FAILED and self.settings.on_auth_failure == "wait":
            outcome = await self._give_back(outcome)
        await self._report(outcome)
        metrics.attempt_ended(outcome, report.duration_ms)
        self.log.info(
            "task_done",
            task_id=task_id,
            success=outcome.success,
            error_code=outcome.error_code,
            duration_ms=report.duration_ms,
        )

    async def _give_back(self, outcome: Outcome) -> Outcome:
        """An authentication failure, with BLOOM_WORKER_ON_AUTH_FAILURE=wait: the worker stops
        taking work (it says so before the attempt is reported, so that the task is not handed
        back to it), and the attempt is reported as a rate limit is, given back without being
        counted, for a worker whose credentials work."""
        message = outcome.error_message or "The Claude CLI could not authenticate"
        if self.credentials_refused is not None:
            await self.credentials_refused(message)
        return replace(
            outcome,
            error_code=ErrorCode.RATE_LIMITED,
            error_message=message + GIVEN_BACK,
            retry_at=int(time.time() * 1000) + GIVEN_BACK_DELAY_MS,
        )

    def _decide(self, report: RunReport) -> Outcome:
        return decide(
            report, desired_format=self.task.desired_format, budget_usd=self.task.policy.budget
        )

    async def _prepare_workspace(self) -> Prepared | None:
        """The task's worktree, ready at its branch's head (None: the task has no workspace),
        the lease renewed meanwhile (a fetch may take minutes)."""
        spec = self.task.workspace
        if spec is None:
            return None
        if not self.settings.serves_workspaces:
            raise WorkspaceFailed("this worker takes no workspace tasks (--allow-clone, git)")

        async def history(patches: bool) -> Mapping[str, Any]:
            try:
                return await self.client.workspace_history(self.task.id, patches=patches)
            except (RuntimeApiError, RuntimeUnreachable) as exc:
                raise WorkspaceFailed(f"the branch's history could not be read: {exc}") from None

        return await self._renewing(self.workspaces.prepare(spec, history))

    async def _keep_change(self, prepared: Prepared, outcome: Outcome) -> Outcome:
        """Commit the run's change, make its patch, push it; in the outcome."""
        result, patch = await self._renewing(
            self.workspaces.finish(prepared, self.task.id, self.task.prompt)
        )
        return replace(outcome, workspace=result, patch=patch)

    async def _renewing(self, work: Awaitable[T]) -> T:
        renewing = asyncio.create_task(self._renew_until_reported())
        try:
            return await work
        finally:
            renewing.cancel()

    async def _execute(self, prepared: Prepared | None = None) -> RunReport:
        """Run the CLI (resuming the context's conversation) while the lease is kept alive."""
        resume = self.conversations.get(self.task.context_id)
        self.cwd = prepared.path if prepared is not None else None
        report = await self._run_cli(resume)
        failed_resume = report.result is None or report.result.get("is_error")
        if (
            resume
            and failed_resume
            and NO_CONVERSATION in (report.stderr_tail + str(report.result))
        ):
            self.conversations.forget(self.task.context_id)  # its transcript is gone: start anew
            report = await self._run_cli(None)
        return report

    def _invocation(self, resume: str | None) -> Invocation:
        settings, task = self.settings, self.task
        context = resolve_hints(list(task.context_hints), settings.project_dir)
        workdir = self.cwd or settings.resolved_work_dir / "tasks" / task.id
        workdir.mkdir(parents=True, exist_ok=True)
        extra = list(settings.claude_args)
        if self.cwd is not None and not any(arg in PERMISSIONS_SET for arg in extra):
            extra += ["--permission-mode", "acceptEdits"]  # headless: else no edit is allowed
        slug = task.agent_slug or "default"
        agent_dirs = [Path.home() / ".claude" / "agents"]
        if settings.project_dir:
            agent_dirs.append(settings.project_dir / ".claude" / "agents")
        return Invocation(
            binary=settings.claude_bin,
            prompt=build_prompt(task.prompt, context),
            cwd=workdir,
            env=child_environment(self.environ, slug, settings.claude_env),
            timeout_sec=task.policy.timeout_sec,
            resume=resume,
            agent=slug if slug != "default" and known_agent(slug, agent_dirs) else None,
            budget_usd=task.policy.budget,
            extra_args=extra,
        )

    async def _run_cli(self, resume: str | None) -> RunReport:
        invocation = self._invocation(resume)
        await self.outbox.add(
            "started",
            {
                "worker_id": self.settings.name,
                "lease_id": self.lease.id,
                "attempt": self.task.attempts,
                "resumed_session": resume,
            },
        )
        process = ClaudeProcess(invocation, self.outbox.add)
        keeper = asyncio.create_task(self._keep_alive(process))
        run = asyncio.create_task(process.run())
        done, _ = await asyncio.wait({keeper, run}, return_when=asyncio.FIRST_COMPLETED)
        if keeper in done and keeper.exception() is not None:
            await process.kill()
            await run
            raise LeaseLost(str(keeper.exception()))
        keeper.cancel()
        return run.result()  # its last events go with the attempt's `finished` (`_report`)

    async def _keep_alive(self, process: ClaudeProcess) -> None:
        """Flush events often and renew the lease every `heartbeat_sec`; stop the CLI when the
        task is cancelled. Raises LeaseLost when the runtime refuses the lease."""
        last_beat = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH_SEC)
            await self.outbox.flush()
            if time.monotonic() - last_beat >= self.settings.heartbeat_sec:
                last_beat = time.monotonic()
                beat = await self._heartbeat()
                if beat is not None and beat.cancel_requested:
                    await process.cancel()

    async def _heartbeat(self) -> HeartbeatReply | None:
        """Renew the lease; None when the runtime could not be reached or refused the beat
        without fencing it (tried again at the next beat)."""
        request = HeartbeatRequest(lease_id=self.lease.id, worker_id=self.settings.name)
        try:
            return await self.client.heartbeat(self.task.id, request)
        except RuntimeUnreachable as exc:
            self.log.warning("heartbeat_unreachable", error=str(exc))
            return None
        except RuntimeApiError as exc:
            if exc.status in FENCED:
                raise LeaseLost(exc.message) from None
            self.log.warning("heartbeat_rejected", error=exc.message)
            return None

    async def _report(self, outcome: Outcome, deadline_sec: float | None = None) -> None:
        """Complete the attempt, retrying with backoff until the runtime answers or the deadline.
        The lease is renewed meanwhile: a complete refused for a while (the artifact store or
        the database down: 503) must not cost the task its lease, or it would run again."""
        finished = {
            "status": "success" if outcome.success else "error",
            "error_code": str(outcome.error_code) if outcome.error_code else None,
            "error": outcome.error_message,
            "duration_ms": outcome.metrics.get("duration_ms"),
            "cost_usd": outcome.metrics.get("cost_usd"),
            "tokens_used": outcome.metrics.get("tokens_used"),
        }
        await self.outbox.add("finished", finished)
        try:
            await self.outbox.flush()
        except LeaseLost as exc:
            self.log.warning("lease_lost_before_complete", reason=str(exc))
            return
        renewing = asyncio.create_task(self._renew_until_reported())
        try:
            await self._complete(outcome, deadline_sec)
        finally:
            renewing.cancel()

    async def _complete(self, outcome: Outcome, deadline_sec: float | None) -> None:
        request = outcome.completion(self.lease.id, self.settings.name)
        deadline = time.monotonic() + (deadline_sec or self.settings.complete_deadline_sec)
        attempt = 0
        while True:
            try:
                await self.client.complete(self.task.id, request)
                return
            except RuntimeApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    self.log.warning("complete_refused", status=exc.status, error=exc.message)
                    return
                error = exc.message
            except RuntimeUnreachable as exc:
                error = str(exc)
            attempt += 1
            pause = min(0.5 * 2**attempt, 15.0) * random.uniform(1.0, 1.3)
            if time.monotonic() + pause > deadline:
                self.log.error("complete_given_up", error=error, attempts=attempt)
                return
            self.log.warning("complete_retry", error=error, attempt=attempt)
            await asyncio.sleep(pause)

    async def _renew_until_reported(self) -> None:
        """Heartbeat every `heartbeat_sec` until cancelled (the complete answered), or until the
        runtime refuses the lease (the complete will hear the same)."""
        with contextlib.suppress(LeaseLost):
            while True:
                await asyncio.sleep(self.settings.heartbeat_sec)
                await self._heartbeat()
