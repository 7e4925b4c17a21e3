"""Approvals (docs/approvals.md): a run that stopped at a tool call in its task's `ask` rules
ends its attempt with the call (`approval_required`); that complete writes the approval and
parks the task in `awaiting_approval`, its worker's slot free. A person's decision (or the
timeout's) puts the task back in the queue, in the decision's transaction; the resumed run gets
the decisions (`rulings`) and applies each to exactly the call it was made for.
"""

from typing import Any

import structlog

from bloom.domain.approvals import (
    DEFAULT_ON_TIMEOUT,
    MAX_NOTE_CHARS,
    TIMED_OUT_NOTE,
    Approval,
    ApprovalStatus,
    Decision,
    PendingCall,
    bounded_input,
    expiry,
    summary,
)
from bloom.domain.audit import AuditAction, task_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, Forbidden, InvalidField, NotFound
from bloom.domain.ids import new_id
from bloom.domain.models import Lease, Task
from bloom.domain.paging import check_limit
from bloom.domain.states import TaskStatus
from bloom.domain.tool_policy import ToolPolicy
from bloom.runtime.services import graphs
from bloom.runtime.services.leasing import LeaseSettings, wake_for
from bloom.runtime.services.signals import QueueSignal, Wake
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)
LIST_LIMIT = 100
RULINGS_LIMIT = 200
EXPIRE_BATCH = 100
SYSTEM = "runtime"
"""The actor of what the runtime decides itself (a timeout)."""


def requested(task: Task, lease: Lease, call: PendingCall, now: int) -> Approval:
    """The approval an attempt's end asks for: its call, its deadline by the task's policy."""
    tools = ToolPolicy.from_json(task.policy.get("tools") or {})
    return Approval(
        id=new_id(now),
        task_id=task.id,
        attempt=task.attempts,
        lease_id=lease.id,
        worker_id=lease.worker_id,
        context_id=task.context_id,
        session_id=call.session_id,
        tool_use_id=call.tool_use_id,
        tool_name=call.tool_name,
        tool_input=bounded_input(call.tool_input),
        reason=call.reason,
        requested_at=now,
        expires_at=expiry(now, tools.approval_timeout_sec),
        on_timeout=tools.on_timeout or DEFAULT_ON_TIMEOUT,
        status=ApprovalStatus.PENDING,
    )


class ApprovalService:
    def __init__(
        self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock, leasing: LeaseSettings
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.leasing = leasing

    async def find(
        self, *, status: str | None = None, task_id: str | None = None, limit: int = LIST_LIMIT
    ) -> list[Approval]:
        check_limit(limit)
        if status is not None and status not in set(ApprovalStatus):
            raise InvalidField("status", f"must be one of {', '.join(ApprovalStatus)}")
        async with self.db.read() as tx:
            return await tx.approvals.find(status=status, task_id=task_id, limit=limit)

    async def get(self, approval_id: str) -> Approval:
        async with self.db.read() as tx:
            found = await tx.approvals.get(approval_id)
        if found is None:
            raise NotFound("Approval not found")
        return found

    async def pending_count(self) -> int:
        async with self.db.read() as tx:
            return await tx.approvals.pending_count()

    async def rulings(
        self, task_id: str, *, worker_id: str | None, lease_id: str | None = None
    ) -> list[dict[str, Any]]:
        """What the task's next run applies: its decided calls, and those approved to be
        remembered in its context. A worker reads them for its own task only. With `lease_id`
        (the run's, the task's current lease), the decisions no run took yet are taken by this
        one: an approval is used once."""
        async with self.db.write() if lease_id else self.db.read() as tx:
            task = await tx.tasks.get(task_id)
            if task is None:
                raise NotFound("Task not found")
            if worker_id is not None and task.worker_id != worker_id:
                raise Forbidden("A worker key reads the decisions of its own tasks only")
            if lease_id is not None:
                if task.lease_id != lease_id:
                    raise Conflict(f"Lease {lease_id} is not the task's current lease")
                await tx.approvals.take(task.id, lease_id)
            found = await tx.approvals.rulings(task.id, task.context_id, RULINGS_LIMIT)
        return [approval.ruling(lease_id) for approval in found]

    async def decide(
        self,
        approval_id: str,
        decision: Decision,
        *,
        actor: str,
        note: str | None = None,
        remember: bool = False,
    ) -> Approval:
        """Approve or deny a pending call, once: the task back in the queue in the same
        transaction. A second, stale or late decision is a Conflict."""
        if note is not None and len(note) > MAX_NOTE_CHARS:
            raise InvalidField("note", f"at most {MAX_NOTE_CHARS} characters")
        if remember and decision is not Decision.APPROVE:
            raise InvalidField("remember", "only an approval is remembered")
        status = ApprovalStatus.APPROVED if decision is Decision.APPROVE else ApprovalStatus.DENIED
        now = self.clock()
        async with self.db.write() as tx:
            decided = await tx.approvals.decide(
                approval_id, status, by=actor, at=now, note=note, remember=remember
            )
            if decided is None:
                found = await tx.approvals.get(approval_id)
                if found is None:
                    raise NotFound("Approval not found")
                raise Conflict(f"Approval {approval_id} is already {found.status}")
            wake = await self._resume(tx, decided, now, actor)
        self.signal.changed(wake)
        log.info("approval_decided", approval_id=approval_id, status=str(status), actor=actor)
        return decided

    async def expire_due(self) -> int:
        """Apply `on_timeout` to the calls whose time ran out: denied (the task resumes and is
        told), or the task failed. How many were expired."""
        now = self.clock()
        async with self.db.read() as tx:
            due = await tx.approvals.due(now, EXPIRE_BATCH)
        expired = 0
        for approval in due:
            async with self.db.write() as tx:
                closed = await tx.approvals.decide(
                    approval.id, ApprovalStatus.EXPIRED, by=SYSTEM, at=now, note=TIMED_OUT_NOTE
                )
                if closed is None:
                    continue  # decided meanwhile
                if closed.on_timeout == "fail":
                    wake = await self._fail(tx, closed, now)
                else:
                    wake = await self._resume(tx, closed, now, SYSTEM)
            expired += 1
            self.signal.changed(wake)
        return expired

    async def _resume(self, tx: Repositories, approval: Approval, now: int, actor: str) -> Wake:
        """The task back in the queue (kept for a while for the worker holding its session)."""
        resumed = await tx.tasks.transition(
            approval.task_id,
            from_statuses=[TaskStatus.AWAITING_APPROVAL],
            values={"status": TaskStatus.QUEUED, "queued_at": now, "not_before": None}
            | {"updated_at": now},
        )
        if resumed is None:
            raise Conflict(f"Task {approval.task_id} is no longer awaiting approval")
        action = {
            ApprovalStatus.APPROVED: AuditAction.APPROVAL_APPROVED,
            ApprovalStatus.DENIED: AuditAction.APPROVAL_DENIED,
        }.get(approval.status, AuditAction.APPROVAL_EXPIRED)
        detail = f"Approval {approval.id} {approval.status}: " + summary(
            approval.tool_name, approval.tool_input
        )
        if approval.note:
            detail += f" ({approval.note})"
        await tx.audit.add(
            task_audit(action, approval.task_id, now=now, actor=actor, detail=detail)
        )
        return await wake_for(tx, self.leasing, now, [approval.task_id])

    async def _fail(self, tx: Repositories, approval: Approval, now: int) -> Wake:
        reason = f"No decision on {summary(approval.tool_name, approval.tool_input)} in time"
        failed = await tx.tasks.transition(
            approval.task_id,
            from_statuses=[TaskStatus.AWAITING_APPROVAL],
            values={"status": TaskStatus.FAILED, "last_error": reason, "updated_at": now},
        )
        if failed is None:
            raise Conflict(f"Task {approval.task_id} is no longer awaiting approval")
        await graphs.ended(tx, failed, now, SYSTEM)  # what waits on it learns of it
        await tx.audit.add(
            task_audit(
                AuditAction.APPROVAL_EXPIRED,
                approval.task_id,
                now=now,
                actor=SYSTEM,
                detail=f"Approval {approval.id} expired: the task failed ({reason})",
            )
        )
        return Wake(len(tx.released))
