"""Push dispatch: a queued task leased to a node's agent and handed to it (`POST /execute-task`),
as the reference runtime does, but without its faults (REFERENCE_BEHAVIOUR.md §1.6, §9).

- The lease comes first (the same compare-and-set and worker choice as `lease`, among workers
  with an agent URL), marked delivered so that no claim hands it out again.
- The callback address the agent gets is the configured public URL, never the caller's Host.
- The caller waits only until the agent has taken the task (`accept_sec`): an answer in that time
  is passed back; an agent still working by then has accepted, and the call goes on in the
  background. The reference agent answers only when the Claude CLI is done and heartbeats once,
  so while its call is open the runtime renews the lease on its behalf.
- An agent that cannot be reached or refuses (a non-2xx answer without `ok: true`) ends the lease
  at once and the task goes back to the queue with its attempt not counted (`dispatch_failed`),
  instead of staying leased until the lease expires. An agent that goes away later, leaving the
  lease open without a result, ends it as a lost lease (retried as its policy says).
"""

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog

from bloom.domain.audit import AuditAction, task_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway
from bloom.domain.fleet import agent_key_header
from bloom.domain.models import Lease, Task, Worker
from bloom.domain.states import IN_FLIGHT, LeaseStatus, TaskStatus
from bloom.runtime.services.agent_ops import said
from bloom.runtime.services.leasing import LeaseService
from bloom.runtime.services.reaping import release_task_of_lost_lease
from bloom.runtime.services.signals import ONE, QueueSignal
from bloom.runtime.storage.repositories import RuntimeDatabase

log = structlog.get_logger(__name__)
CONNECT_TIMEOUT_SEC = 5.0
EXTRA_RUN_SEC = 30
"""The agent's call may last the task's timeout and this much more (as the reference's)."""


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    callback_url: str
    agent_key: str
    """The fleet's agent key: each node is sent its own key, derived from it."""
    accept_sec: float


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The seed's answer: `{dispatched, task_id, worker_id, lease_id, execution}`; `execution`
    is the agent's answer, None while it is still working."""

    task_id: str
    worker_id: str
    lease_id: str
    execution: Any
    dispatched: bool = True


class AgentRefused(Exception):
    """The agent could not be reached, or answered that it will not run the task."""


class DispatchFailed(BadGateway):
    """Answered 502 in the seed's shape: `{dispatched: false, task_id, worker_id, error}`."""

    def __init__(self, task_id: str, worker_id: str, message: str):
        super().__init__(message)
        self.task_id = task_id
        self.worker_id = worker_id


class Dispatcher:
    def __init__(
        self,
        db: RuntimeDatabase,
        leases: LeaseService,
        signal: QueueSignal,
        clock: Clock,
        http: httpx.AsyncClient,
        settings: DispatchSettings,
    ):
        self.db = db
        self.leases = leases
        self.signal = signal
        self.clock = clock
        self.http = http
        self.settings = settings
        self._calls: set[asyncio.Task[None]] = set()

    async def dispatch(
        self,
        task_id: str,
        *,
        worker_id: str | None = None,
        ttl_sec: int | None = None,
        actor: str | None = None,
    ) -> Dispatched:
        """Lease the task to a node's agent and hand it over, the lease and the dispatch audited
        as `actor`'s (the seed's "router" when None); a failure is the router's."""
        actor = actor or "router"
        lease, worker = await self.leases.lease(
            task_id, worker_id=worker_id, ttl_sec=ttl_sec, pushed=True, actor=actor
        )
        task = await self._dispatched(lease, worker, actor)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        call = asyncio.create_task(self._call(task, lease, worker, answer))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        await asyncio.wait({answer}, timeout=self.settings.accept_sec)
        if not answer.done():
            answer.cancel()  # still working: it has taken the task, and nobody waits any more
            return Dispatched(task.id, worker.id, lease.id, None)
        refused = answer.exception()
        if refused is not None:
            await self._undo(lease, str(refused))
            raise DispatchFailed(task.id, worker.id, f"Dispatch to {worker.id} failed: {refused}")
        return Dispatched(task.id, worker.id, lease.id, answer.result())

    async def close(self) -> None:
        """Stop following calls in flight (their leases lapse by TTL if no result comes)."""
        for call in list(self._calls):
            call.cancel()
        for call in list(self._calls):
            with contextlib.suppress(asyncio.CancelledError):
                await call

    async def _dispatched(self, lease: Lease, worker: Worker, actor: str) -> Task:
        now = self.clock()
        async with self.db.write() as tx:
            task = await tx.tasks.get(lease.task_id)
            await tx.audit.add(
                task_audit(
                    AuditAction.TASK_DISPATCHED,
                    lease.task_id,
                    now=now,
                    actor=actor,
                    detail=f"Task {lease.task_id} dispatched to worker {worker.id}",
                )
            )
        assert task is not None  # leased in the transaction before this one
        return task

    def _body(self, task: Task, lease: Lease, worker: Worker) -> dict[str, Any]:
        """The reference agent's `ExecuteTaskRequest` (which ignores the rest), and for a BLOOM
        worker's agent the lease it fetches the task by (it trusts nothing else of the body)."""
        return {
            "task_id": task.id,
            "prompt": task.prompt,
            "context_id": task.context_id,
            "agent_slug": task.agent_slug,
            "desired_format": task.desired_format,
            "context_hints": task.context_hints,
            "policy": task.policy,
            "runtime_url": self.settings.callback_url,
            "lease_id": lease.id,
            "worker_id": worker.id,
        }

    async def _call(
        self, task: Task, lease: Lease, worker: Worker, answer: asyncio.Future[Any]
    ) -> None:
        """POST the task to the agent; settle `answer` with its reply (or AgentRefused), keeping
        the lease alive while the call is open; afterwards end a lease left without a result."""
        keeper = asyncio.create_task(self._keep_alive(lease))
        try:
            reply = await self._post(task, lease, worker)
        except AgentRefused as exc:
            if not answer.done():
                answer.set_exception(exc)
                return
            await self._lost(lease, f"Agent call ended: {exc}")
            return
        finally:
            keeper.cancel()
        if not answer.done():
            answer.set_result(reply)
        if isinstance(reply, dict) and reply.get("accepted") is True:
            return  # an agent that runs it in the background, heartbeating the lease itself
        await self._lost(lease, "Agent answered without completing the task")

    async def _post(self, task: Task, lease: Lease, worker: Worker) -> Any:
        timeout_sec = float(task.policy.get("timeout_sec") or 120) + EXTRA_RUN_SEC
        try:
            response = await self.http.post(
                worker.url.rstrip("/") + "/execute-task",
                content=orjson.dumps(self._body(task, lease, worker)),
                headers={
                    "Content-Type": "application/json",
                    **agent_key_header(self.settings.agent_key, worker.id),
                },
                timeout=httpx.Timeout(timeout_sec, connect=CONNECT_TIMEOUT_SEC),
            )
        except httpx.HTTPError as exc:
            raise AgentRefused(said(exc)) from None
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            data = None
        accepted = isinstance(data, dict) and data.get("ok") is True
        if not response.is_success and not accepted:
            detail = data.get("detail") or data.get("error") if isinstance(data, dict) else None
            raise AgentRefused(f"agent answered {response.status_code}: {detail or 'refused'}")
        return data

    async def _keep_alive(self, lease: Lease) -> None:
        """Renew the lease at a third of its TTL while the agent's call is open."""
        every = max(1.0, lease.ttl_seconds / 3)
        while True:
            await asyncio.sleep(every)
            async with self.db.write() as tx:
                renewal = await tx.leases.renew(lease.id, lease.task_id, self.clock())
            if renewal is None:
                return  # ended: completed, cancelled or lapsed

    async def _undo(self, lease: Lease, reason: str) -> None:
        """The agent never took the task: the lease ends, the task is queued again and the
        attempt is not counted."""
        now = self.clock()
        async with self.db.write() as tx:
            ended = await tx.leases.end(lease.id, LeaseStatus.RELEASED, now)
            task = await tx.tasks.get(lease.task_id)
            if ended is not None and task is not None and task.lease_id == lease.id:
                await tx.tasks.transition(
                    task.id,
                    from_statuses=IN_FLIGHT,
                    lease_id=lease.id,
                    values={
                        "status": TaskStatus.QUEUED,
                        "lease_id": None,
                        "worker_id": None,
                        "attempts": max(0, task.attempts - 1),
                        "queued_at": now,
                        "updated_at": now,
                    },
                )
            await tx.audit.add(
                task_audit(
                    AuditAction.DISPATCH_FAILED,
                    lease.task_id,
                    now=now,
                    actor="router",
                    detail=f"Dispatch to {lease.worker_id} failed: {reason}",
                )
            )
        self.signal.changed(ONE)  # its task is back in the queue

    async def _lost(self, lease: Lease, reason: str) -> None:
        """After the agent's call: a lease still open without a result is a lost one."""
        now = self.clock()
        async with self.db.write() as tx:
            ended = await tx.leases.end(lease.id, LeaseStatus.FAILED, now)
            if ended is None:
                return  # completed, cancelled or lapsed already: nothing is left open
            await release_task_of_lost_lease(tx, ended, now, actor="router", reason=reason)
        log.warning("dispatch_left_open", task_id=lease.task_id, lease_id=lease.id, reason=reason)
        self.signal.changed(ONE)  # its task is back in the queue
