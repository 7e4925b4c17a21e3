"""Which of a task's decisions (`GET /llm-tasks/{id}/decisions`) a run applies (pure).

A decision on a call applies only when the run resumes the session the call was deferred in:
such a run continues that session where it stopped (its prompt is not sent again). A run that
starts afresh (no session here, or its transcript gone) applies none of them: the model will
ask for its calls anew, and a person decides again (docs/approvals.md). Calls approved to be
remembered apply to every run of the context.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from bloom.worker.agents.base import Decision


def applying(
    rulings: Sequence[Mapping[str, Any]], task_id: str, resume: str | None
) -> tuple[tuple[Decision, ...], bool]:
    """The decisions a run of `task_id` resuming `resume` applies, and whether it continues a
    session stopped at a deferred call."""
    own = [
        ruling
        for ruling in rulings
        if resume is not None
        and ruling.get("task_id") == task_id
        and ruling.get("session_id") == resume
    ]
    remembered = [ruling for ruling in rulings if ruling.get("remember") and ruling not in own]
    return tuple(_decision(ruling) for ruling in [*own, *remembered]), bool(own)


def _decision(ruling: Mapping[str, Any]) -> Decision:
    allow = ruling.get("decision") == "approve"
    who = ruling.get("decided_by") or "a person"
    note = ruling.get("note")
    reason = None if allow else f"Denied by {who}" + (f": {note}" if note else "")
    return Decision(
        call_id=str(ruling.get("tool_use_id") or ""),
        allow=allow,
        reason=reason,
        tool=str(ruling.get("tool_name") or ""),
        input_digest=str(ruling.get("input_digest") or ""),
        remember=bool(ruling.get("remember")),
    )
