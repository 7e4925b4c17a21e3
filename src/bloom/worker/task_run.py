"""One leased task on this worker: run the CLI, keep the lease alive, forward its events, and
report the outcome (retried until the runtime has it).

The lease is the fence: when a heartbeat or an event post is refused (the lease expired, was
replaced, or the task is gone) the CLI is killed and nothing is reported, because another worker
may own the task by now. The first heartbeat, which confirms a claimed lease, is sent as the CLI
starts; the CLI gets its prompt only once that heartbeat is answered (`Confirmation`).

The complete carries the run's last events (those not yet posted, `finished` among them), and,
when the worker has a free slot for it, asks for the worker's next task (`claim_next`): one call
ends a task and may start the next.
"""

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable
from bloom.clients.wire import (
    ClaimNext,
    CompleteRequest,
    Grant,
    HeartbeatReply,
    HeartbeatRequest,
    TaskInfo,
)
from bloom.domain.retry import ErrorCode
from bloom.domain.tool_policy import asks
from bloom.worker import metrics
from bloom.worker.agents import registry
from bloom.worker.agents.base import AgentCli, Launch, Refused, RunSpec
from bloom.worker.agents.outcome import Outcome, PendingCall, RunReport
from bloom.worker.agents.process import AgentProcess, Gate
from bloom.worker.conversations import ConversationBook
from bloom.worker.decisions import applying
from bloom.worker.outbox import FENCED, MAX_BATCH_BYTES, EventOutbox, LeaseLost
from bloom.worker.prompt import build_prompt, resolve_hints
from bloom.worker.settings import WorkerSettings
from bloom.worker.tool_log import ToolLog
from bloom.worker.workspace import Author, Prepared, WorkspaceFailed, Workspaces

T = TypeVar("T")

log = structlog.get_logger("bloom.worker")

FLUSH_SEC = 0.5
COMPLETE_BYTES = 4 * 1024 * 1024
"""A complete's output, error, patch and events together stay within this (the body limit, 5
MiB by default): the events that would not fit are posted before it."""
USAGE_LIMIT_FALLBACK_MS = 60 * 60 * 1000
GIVEN_BACK_DELAY_MS = 1000
"""A task given back for an authentication failure (BLOOM_WORKER_ON_AUTH_FAILURE=wait) may run
again after this, on a worker whose credentials work."""
GIVEN_BACK = " The task was given back to the queue (BLOOM_WORKER_ON_AUTH_FAILURE=wait)."


@dataclass(slots=True)
class DecisionsUnread(Exception):
    """The runtime could not say what was decided on the task's deferred calls."""


class Features:
    """What the runtime's complete takes, as this worker has found (shared by its runs)."""

    complete_extras: bool = True
    """Events and `claim_next` in the complete; False once a runtime refused them (an older
    one): then the events are posted first and the next task is claimed apart, as before."""


class Confirmation:
    """A run's first heartbeat, which confirms the claimed lease (the task becomes `running`),
    sent as the CLI starts rather than before it: its round trip passes while the CLI boots. The
    prompt waits for its answer (`allows`), so no model is asked and no tool runs under a lease
    the runtime refused, nor for a task cancelled meanwhile."""

    def __init__(self, beat: Awaitable[HeartbeatReply | None]):
        self._beat = asyncio.ensure_future(beat)

    async def settled(self) -> None:
        with contextlib.suppress(LeaseLost):
            await asyncio.shield(self._beat)

    async def allows(self) -> bool:
        await self.settled()
        return self.lost is None and not self.cancelled

    @property
    def lost(self) -> LeaseLost | None:
        """The refusal, once the heartbeat was answered with one."""
        if not self._beat.done() or self._beat.cancelled():
            return None
        error = self._beat.exception()
        return error if isinstance(error, LeaseLost) else None

    @property
    def cancelled(self) -> bool:
        """The heartbeat said someone asked the task to stop."""
        if not self._beat.done() or self._beat.cancelled() or self._beat.exception():
            return False
        beat = self._beat.result()
        return beat is not None and beat.cancel_requested

    def cancel(self) -> None:
        self._beat.cancel()


@dataclass(slots=True)
class Pause:
    """Epoch ms before which this worker takes no work (a usage limit's reset)."""

    until_ms: int = 0

    def remaining_sec(self) -> float:
        return max(0.0, self.until_ms / 1000 - time.time())


class TaskRun:
    def __init__(
        self,
        settings: WorkerSettings,
        client: RuntimeClient,
        conversations: ConversationBook,
        pause: Pause,
        grant: Grant,
        environ: Mapping[str, str] = os.environ,
        credentials_refused: Callable[[str, str], Awaitable[None]] | None = None,
        claim_next: Callable[[TaskInfo], bool] | None = None,
        features: Features | None = None,
        agent: AgentCli | None = None,
    ):
        self.settings = settings
        self.agent = agent or registry.adapters(settings).get(grant.task.cli)
        """The task's agent CLI: everything particular to it goes through this boundary (None:
        this worker has none for the task's `cli`)."""
        self.credentials_refused = credentials_refused
        """Told (before the attempt is reported, with the CLI's name and the error) when the CLI
        could not authenticate and the worker waits for its credentials instead of failing the
        task."""
        self.claim_next = claim_next
        """Asked as the complete is sent: whether it should claim this slot's next task (a free
        slot: not stopping, paused or waiting for credentials). None: never (a pushed run)."""
        self.features = features or Features()
        self.client = client
        self.conversations = conversations
        self.pause = pause
        self.task = grant.task
        self.lease = grant.lease
        self.environ = environ
        self.outbox = EventOutbox(client, self.task.id, self.lease.id, settings.name)
        self.workspaces = Workspaces(settings.workspaces_dir, Author(*settings.git_author_parts))
        self.cwd: Path | None = None
        self.tool_log = ToolLog()
        self.rulings: list[Mapping[str, Any]] = []
        """The task's decisions on deferred calls (a task with `ask` rules; `decisions`)."""
        """The workspace's worktree, where the CLI runs (None: a directory of the task's own)."""
        self.log = log.bind(task_id=self.task.id, lease_id=self.lease.id)

    async def run(self) -> Grant | None:
        """Run the attempt and report it; the slot's next task when the complete claimed one."""
        task_id, context = self.task.id, self.task.context_id
        first = Confirmation(self._heartbeat())
        if self.task.workspace is not None:
            # A workspace is prepared (fetched, its worktree reset) only under a confirmed lease.
            await first.settled()
        attempted = None
        if first.lost is None and not first.cancelled:
            attempted = await self._attempt(first)
        await first.settled()
        if first.lost is not None:
            self.log.warning("lease_lost_before_start", reason=str(first.lost))
            return None
        if first.cancelled:
            cancelled = Outcome(
                False,
                error_message="Cancelled before it started",
                error_code=ErrorCode.CANCELLED,
                metrics={"duration_ms": 0},
            )
            return await self._report(cancelled)
        if attempted is None:
            return None  # the lease was lost while it ran
        report, outcome = attempted
        if outcome.pending is not None:
            outcome = replace(outcome, pending=self._asking(outcome.pending))
        pending_id = outcome.pending.call_id if outcome.pending else None
        outcome = replace(outcome, tool_calls=tuple(self.tool_log.record(self.rulings, pending_id)))
        if outcome.session_id and not report.timed_out:
            self.conversations.set(context, outcome.session_id)
        if outcome.error_code is ErrorCode.USAGE_LIMIT:
            until = outcome.retry_at or int(time.time() * 1000) + USAGE_LIMIT_FALLBACK_MS
            self.pause.until_ms = max(self.pause.until_ms, until)
            outcome = replace(outcome, retry_at=until)
        if outcome.error_code is ErrorCode.AUTH_FAILED and self.settings.on_auth_failure == "wait":
            outcome = await self._give_back(outcome)
        following = await self._report(outcome)
        metrics.attempt_ended(outcome, report.duration_ms, self.task.cli)
        self.log.info(
            "task_done",
            task_id=task_id,
            success=outcome.success,
            error_code=outcome.error_code,
            duration_ms=report.duration_ms,
        )
        return following

    async def _attempt(self, first: Confirmation) -> tuple[RunReport, Outcome] | None:
        """The workspace prepared, the CLI run (its prompt held until `first` allows it), the
        change kept; None when the lease was lost meanwhile."""
        if self.agent is None:
            missing = f"This worker has no {self.task.cli} CLI"
            report = RunReport(exit_code=None, duration_ms=0, stderr_tail=missing)
            return report, Outcome(
                False, error_message=missing, error_code=ErrorCode.ERROR, metrics={"duration_ms": 0}
            )
        try:
            async with self.conversations.lock(self.task.context_id):
                self.rulings = await self._rulings()
                prepared = await self._prepare_workspace()
                report = await self._execute(first, prepared)
                outcome = self._decide(report)
                if prepared is not None and outcome.success:
                    outcome = await self._keep_change(prepared, outcome)
        except LeaseLost as exc:
            self.log.warning("lease_lost", reason=str(exc))
            return None
        except Refused as exc:
            self.log.warning("run_refused", error=str(exc))
            report = RunReport(exit_code=None, duration_ms=0, stderr_tail=str(exc))
            outcome = Outcome(
                False,
                error_message=str(exc),
                error_code=ErrorCode.FATAL,
                metrics={"duration_ms": 0},
            )
        except DecisionsUnread as exc:
            self.log.warning("decisions_unread", error=str(exc))
            report = RunReport(exit_code=None, duration_ms=0, stderr_tail=str(exc))
            outcome = Outcome(
                False,
                error_message=f"The task's decisions could not be read: {exc}",
                error_code=ErrorCode.RATE_LIMITED,  # given back, not counted: nothing ran
                metrics={"duration_ms": 0},
            )
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
            first.cancel()
            # The worker is stopping and the drain time is over: say so, so that the task is
            # retried now rather than when its lease runs out.
            stopped = Outcome(
                False,
                error_message="The worker stopped before the task ended",
                error_code=ErrorCode.ERROR,
                metrics={"duration_ms": 0},
            )
            await asyncio.shield(self._report(stopped, deadline_sec=5, follow=False))
            raise
        return report, outcome

    async def _give_back(self, outcome: Outcome) -> Outcome:
        """An authentication failure, with BLOOM_WORKER_ON_AUTH_FAILURE=wait: the worker stops
        taking work (it says so before the attempt is reported, so that the task is not handed
        back to it), and the attempt is reported as a rate limit is, given back without being
        counted, for a worker whose credentials work."""
        message = outcome.error_message or f"The {self._adapter().title} CLI could not authenticate"
        if self.credentials_refused is not None:
            await self.credentials_refused(self.task.cli, message)
        return replace(
            outcome,
            error_code=ErrorCode.RATE_LIMITED,
            error_message=message + GIVEN_BACK,
            retry_at=int(time.time() * 1000) + GIVEN_BACK_DELAY_MS,
        )

    def _adapter(self) -> AgentCli:
        assert self.agent is not None  # `_attempt` runs nothing without one
        return self.agent

    def _decide(self, report: RunReport) -> Outcome:
        return self._adapter().outcome(
            report, desired_format=self.task.desired_format, budget_usd=self.task.policy.budget
        )

    def _asking(self, call: PendingCall) -> PendingCall:
        """The call a run stopped at, with the rule that asks for it."""
        tools = self.task.policy.tools
        rule = (
            next((r for r in tools.ask if asks(r, call.tool, call.input)), None) if tools else None
        )
        return replace(call, reason=f"{rule} is in the task's ask rules" if rule else None)

    async def _rulings(self) -> list[Mapping[str, Any]]:
        """A task with `ask` rules: the decisions made on its calls, for the run to apply."""
        tools = self.task.policy.tools
        if tools is None or not tools.ask:
            return []
        try:
            return await self.client.decisions(self.task.id, self.lease.id)
        except (RuntimeApiError, RuntimeUnreachable) as exc:
            raise DecisionsUnread(str(exc)) from None

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

    async def _execute(self, first: Confirmation, prepared: Prepared | None = None) -> RunReport:
        """Run the CLI (resuming the context's conversation) while the lease is kept alive; its
        prompt waits for `first` to allow it (else it is killed unfed)."""
        resume = self.conversations.get(self.task.context_id)
        self.cwd = prepared.path if prepared is not None else None
        report = await self._run_cli(resume, first.allows)
        if (
            first.lost is None
            and not first.cancelled
            and resume
            and self._adapter().session_lost(report)
        ):
            self.conversations.forget(self.task.context_id)  # its transcript is gone: start anew
            report = await self._run_cli(None)
        return report

    def _invocation(self, resume: str | None) -> Launch:
        """The adapter's command for this run; `Refused` when its CLI cannot do what the task
        asks."""
        settings, task = self.settings, self.task
        context = resolve_hints(list(task.context_hints), settings.project_dir)
        workdir = self.cwd or settings.resolved_work_dir / "tasks" / task.id
        workdir.mkdir(parents=True, exist_ok=True)
        decided, continues = applying(self.rulings, task.id, resume)
        spec = RunSpec(
            prompt=build_prompt(task.prompt, context),
            cwd=workdir,
            policy=task.policy,
            agent_slug=task.agent_slug or "default",
            resume=resume,
            workspace=self.cwd is not None,
            decisions=decided,
            continues=continues,
        )
        return self._adapter().invocation(spec, self.environ)

    async def _run_cli(self, resume: str | None, gate: Gate | None = None) -> RunReport:
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
        process = AgentProcess(invocation, self._adapter().parser(), self._event, gate)
        keeper = asyncio.create_task(self._keep_alive(process))
        run = asyncio.create_task(process.run())
        done, _ = await asyncio.wait({keeper, run}, return_when=asyncio.FIRST_COMPLETED)
        if keeper in done and keeper.exception() is not None:
            await process.kill()
            await run
            raise LeaseLost(str(keeper.exception()))
        keeper.cancel()
        return run.result()  # its last events go with the attempt's `finished` (`_report`)

    async def _event(self, kind: str, data: Any) -> None:
        """A run's event: on its way to the runtime, its tool calls noted."""
        self.tool_log.saw(self._adapter().normalise(kind, data))
        await self.outbox.add(kind, data)

    async def _keep_alive(self, process: AgentProcess) -> None:
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

    async def _report(
        self, outcome: Outcome, deadline_sec: float | None = None, *, follow: bool = True
    ) -> Grant | None:
        """Complete the attempt with its last events, retrying with backoff until the runtime
        answers or the deadline; with `follow`, the complete may claim the slot's next task
        (returned). The lease is renewed meanwhile: a complete refused for a while (the artifact
        store or the database down: 503) must not cost the task its lease, or it would run
        again."""
        finished = {
            "status": "success" if outcome.success else "error",
            "error_code": str(outcome.error_code) if outcome.error_code else None,
            "error": outcome.error_message,
            "duration_ms": outcome.metrics.get("duration_ms"),
            "cost_usd": outcome.metrics.get("cost_usd"),
            "tokens_used": outcome.metrics.get("tokens_used"),
        }
        await self.outbox.add("finished", finished)
        request = outcome.completion(self.lease.id, self.settings.name)
        try:
            if self.features.complete_extras:
                request = replace(
                    request,
                    events=await self.outbox.last(_room(request)),
                    claim_next=self._next_claim() if follow else None,
                )
            else:
                await self.outbox.flush()
        except LeaseLost as exc:
            self.log.warning("lease_lost_before_complete", reason=str(exc))
            return None
        renewing = asyncio.create_task(self._renew_until_reported())
        try:
            return await self._complete(request, deadline_sec)
        finally:
            renewing.cancel()

    def _next_claim(self) -> ClaimNext | None:
        if self.claim_next is None or not self.claim_next(self.task):
            return None
        return ClaimNext(wait_sec=0.0, ttl_sec=self.settings.lease_ttl_sec)

    async def _complete(self, request: CompleteRequest, deadline_sec: float | None) -> Grant | None:
        deadline = time.monotonic() + (deadline_sec or self.settings.complete_deadline_sec)
        attempt = 0
        while True:
            try:
                reply = await self.client.complete(self.task.id, request)
            except RuntimeApiError as exc:
                if exc.status == 400 and (request.events or request.claim_next):
                    request = await self._plain(request, exc.message)  # an older runtime
                    continue
                if exc.status < 500 and exc.status != 429:
                    self.log.warning("complete_refused", status=exc.status, error=exc.message)
                    return None
                error = exc.message
            except RuntimeUnreachable as exc:
                error = str(exc)
            else:
                if reply.next_error:
                    self.log.info("claim_next_refused", error=reply.next_error)
                if reply.next is not None:
                    metrics.claim_answered("granted")
                return reply.next
            attempt += 1
            pause = min(0.5 * 2**attempt, 15.0) * random.uniform(1.0, 1.3)
            if time.monotonic() + pause > deadline:
                self.log.error("complete_given_up", error=error, attempts=attempt)
                return None
            self.log.warning("complete_retry", error=error, attempt=attempt)
            await asyncio.sleep(pause)

    async def _plain(self, request: CompleteRequest, refusal: str) -> CompleteRequest:
        """A runtime that refused a complete's events or `claim_next` (one older than both):
        the events posted first, the complete sent without them, and so from now on."""
        self.log.warning("complete_extras_refused", error=refusal)
        self.features.complete_extras = False
        self.outbox.pending[:0] = [dict(event) for event in request.events]
        with contextlib.suppress(LeaseLost):  # the complete will hear the same
            await self.outbox.flush()
        return replace(request, events=(), claim_next=None)

    async def _renew_until_reported(self) -> None:
        """Heartbeat every `heartbeat_sec` until cancelled (the complete answered), or until the
        runtime refuses the lease (the complete will hear the same)."""
        with contextlib.suppress(LeaseLost):
            while True:
                await asyncio.sleep(self.settings.heartbeat_sec)
                await self._heartbeat()


def _room(request: CompleteRequest) -> int:
    """Bytes a complete's events may take beside its output, error and patch."""
    texts = (request.output, request.error_message, request.patch)
    used = sum(len(text.encode()) for text in texts if text)
    return max(0, min(MAX_BATCH_BYTES, COMPLETE_BYTES - used))
