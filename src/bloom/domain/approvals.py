"""Approvals: a tool call an agent wants that a person must allow first (a rule in the task's
`policy.tools.ask`). The run stops at the call (the CLI defers it), the task waits, without a
worker, in `awaiting_approval`; a decision (or its timeout) puts it back in the queue, and the
run resumes the same session with the decision applied to exactly that call. docs/approvals.md.
"""

import hashlib
import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

DEFAULT_TIMEOUT_SEC = 86_400
"""How long a call waits for a decision when the task's policy does not say."""
DEFAULT_ON_TIMEOUT = "deny"
MAX_NOTE_CHARS = 2000
MAX_INPUT_BYTES = 64 * 1024
"""A pending call's input as kept (bigger inputs keep a preview: the person sees what runs)."""
MAX_REASON_CHARS = 1000
TIMED_OUT_NOTE = "No decision came in time: denied (the task's on_timeout)"
CANCELLED_NOTE = "The task was cancelled"
INTERRUPTED_NOTE = (
    "This call was approved once, and the run that took the approval stopped before it ended "
    "(its worker was lost): the call may have run, or partly. It is not run again without a "
    "new decision; ask again if it must run."
)


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Decision(StrEnum):
    APPROVE = "approve"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class PendingCall:
    """The call a run stopped at, as its worker reports it with the attempt's end."""

    tool_use_id: str
    tool_name: str
    tool_input: dict[str, Any]
    session_id: str | None = None
    """The session the call belongs to: a decision applies only when that session resumes."""
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_use_id": self.tool_use_id,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "session_id": self.session_id,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Approval:
    id: str
    task_id: str
    attempt: int
    lease_id: str
    worker_id: str
    context_id: str
    session_id: str | None
    tool_use_id: str
    tool_name: str
    tool_input: dict[str, Any]
    reason: str | None
    requested_at: int
    expires_at: int
    on_timeout: str
    status: ApprovalStatus
    decided_by: str | None = None
    decided_at: int | None = None
    note: str | None = None
    remember: bool = False
    applied_lease: str | None = None
    """The lease of the run that took this decision (an approval is used once: a later run,
    after that one was lost, is told the call was interrupted rather than run it again)."""

    def to_json(self) -> dict[str, Any]:
        """As the API answers it (and the `approval_requested` event carries it)."""
        return asdict(self) | {
            "status": str(self.status),
            "summary": summary(self.tool_name, self.tool_input),
        }

    def ruling(self, lease_id: str | None = None) -> dict[str, Any]:
        """What the worker applies when the session resumes: allow or deny this one call (or,
        remembered, every call equal to it in the context), with the person's note. For the
        run of `lease_id`: an approval another run took is a denial saying so."""
        allowed = self.status == ApprovalStatus.APPROVED
        taken = (
            lease_id is not None
            and self.applied_lease is not None
            and self.applied_lease != lease_id
            and not self.remember
        )
        if allowed and taken:
            return self.ruling() | {"decision": Decision.DENY, "note": INTERRUPTED_NOTE}
        return {
            "approval_id": self.id,
            "task_id": self.task_id,
            "tool_use_id": self.tool_use_id,
            "session_id": self.session_id,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "input_digest": input_digest(self.tool_input),
            "decision": Decision.APPROVE if allowed else Decision.DENY,
            "note": self.note,
            "decided_by": self.decided_by,
            "remember": self.remember,
        }


def input_digest(tool_input: Any) -> str:
    """A call's input as one short string: equal inputs, equal digests (keys in any order)."""
    text = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def bounded_input(tool_input: Any) -> dict[str, Any]:
    """A call's input as an approval keeps it: whole when it is small, else a preview."""
    data = tool_input if isinstance(tool_input, dict) else {"value": tool_input}
    text = json.dumps(data, default=str)
    if len(text.encode()) <= MAX_INPUT_BYTES:
        return data
    return {"truncated": True, "preview": text[: MAX_INPUT_BYTES // 4]}


def expiry(now: int, timeout_sec: int | None) -> int:
    """When a call requested at `now` (epoch ms) stops waiting for a decision."""
    return now + 1000 * (timeout_sec or DEFAULT_TIMEOUT_SEC)


def summary(tool_name: str, tool_input: dict[str, Any], limit: int = 200) -> str:
    """One line saying what the call does: a Bash command as the command, a file tool's path,
    a fetch's URL; else the input as JSON."""
    for key in ("command", "file_path", "path", "url", "pattern"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            line = " ".join(value.split())
            break
    else:
        line = json.dumps(tool_input, default=str)
    return f"{tool_name}: {line}"[:limit]
