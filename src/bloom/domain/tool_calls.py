"""Every tool call in the record (docs/approvals.md): what an attempt's agent called, in one line
each, and how the call was decided. The worker reports them with the attempt's end; the runtime
writes each as an audit entry (`tool_call`) in the complete's transaction."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

MAX_CALLS = 200
"""Tool calls an attempt reports (the first ones; the rest are counted in the last line)."""
MAX_SUMMARY_CHARS = 300


class Ruled(StrEnum):
    """How a call was decided."""

    ALLOWED = "allowed"
    """By the task's policy (its allow rules, the permission mode)."""
    APPROVED = "approved"
    """By a person (`decided_by`), or remembered in the context."""
    DENIED = "denied"
    """By the policy or the CLI's permission check, or by a person."""
    ASKED = "asked"
    """Deferred: the run stopped here, waiting for a person."""
    TIMED_OUT = "timed_out"
    """Denied because no one decided in time."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    summary: str
    ruled: Ruled
    decided_by: str | None = None
    failed: bool = False
    """It ran, and its tool answered with an error."""

    def detail(self) -> str:
        """The audit entry's detail."""
        how = str(self.ruled) + (f" by {self.decided_by}" if self.decided_by else "")
        return f"{self.summary} ({how}{', failed' if self.failed else ''})"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "summary": self.summary,
            "ruled": str(self.ruled),
            "decided_by": self.decided_by,
            "failed": self.failed,
        }
