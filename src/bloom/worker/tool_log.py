"""The tool calls of one run, as its events pass (normalised by the run's adapter), and how each
was decided, for the attempt's end (`domain.tool_calls`)."""

from collections.abc import Mapping, Sequence
from typing import Any

from bloom.domain.approvals import TIMED_OUT_NOTE, summary
from bloom.domain.tool_calls import MAX_CALLS, MAX_SUMMARY_CHARS, Ruled, ToolCall
from bloom.worker.agents.base import EventKind

REFUSALS = ("denied", "haven't granted", "not allowed", "No such tool available")
"""What a tool's error answer says when the call was refused rather than run."""


class ToolLog:
    def __init__(self) -> None:
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self.answers: dict[str, tuple[bool, str]] = {}

    def saw(self, normalised: Sequence[Mapping[str, Any]]) -> None:
        """Take note of a run's normalised events."""
        for event in normalised:
            call_id = str(event.get("id") or "")
            if event.get("kind") == EventKind.TOOL_CALL and len(self.calls) < MAX_CALLS:
                given = event.get("input")
                self.calls[call_id] = (
                    str(event.get("name")),
                    given if isinstance(given, dict) else {},
                )
            elif event.get("kind") == EventKind.TOOL_RESULT:
                self.answers[call_id] = (
                    bool(event.get("is_error")),
                    str(event.get("output") or ""),
                )

    def record(
        self, rulings: Sequence[Mapping[str, Any]], pending_id: str | None
    ) -> list[ToolCall]:
        """Each call seen, in order (a resumed run's decided call first), and how it was
        decided: the person's decision where one was made, asked (the call the run stopped
        at), denied (its answer a refusal), else allowed by the policy."""
        decided = {str(ruling.get("tool_use_id")): ruling for ruling in rulings}
        # a resumed run answers the deferred call it was decided on without calling it again
        resumed = {
            call_id: (str(ruling.get("tool_name")), dict(ruling.get("tool_input") or {}))
            for call_id in self.answers
            if call_id not in self.calls and (ruling := decided.get(call_id)) is not None
        }
        record = []
        for call_id, (name, tool_input) in {**resumed, **self.calls}.items():
            failed, answer = self.answers.get(call_id, (False, ""))
            ruling = decided.get(call_id)
            ruled, by = Ruled.ALLOWED, None
            if ruling is not None:
                timed_out = ruling.get("note") == TIMED_OUT_NOTE
                allowed = ruling.get("decision") == "approve"
                ruled = (
                    Ruled.APPROVED if allowed else Ruled.TIMED_OUT if timed_out else Ruled.DENIED
                )
                by = None if timed_out else str(ruling.get("decided_by") or "") or None
            elif call_id == pending_id:
                ruled = Ruled.ASKED
            elif failed and any(word in answer for word in REFUSALS):
                ruled = Ruled.DENIED
            record.append(
                ToolCall(
                    call_id,
                    name,
                    summary(name, tool_input, MAX_SUMMARY_CHARS),
                    ruled,
                    by,
                    failed=failed and ruled in (Ruled.ALLOWED, Ruled.APPROVED),
                )
            )
        return record
