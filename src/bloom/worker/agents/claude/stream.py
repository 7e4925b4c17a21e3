"""Reading the Claude CLI's `stream-json` output: each line a JSON event, posted as it is under
the task event type `claude` (the dashboard, `bloom task watch` and MCP read those), the `result`
event kept as the run's final record; and those events as normalised ones (`EventKind`).
"""

import json
from typing import Any

from bloom.worker.agents.base import EventKind, TaskEvent, agent_event

EVENT_TYPE = "claude"


class ClaudeStream:
    """One run's stdout."""

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None

    def feed(self, line: str) -> list[TaskEvent]:
        try:
            event = json.loads(line)
        except ValueError:
            return [("stderr", {"line": line[:2000]})]
        if isinstance(event, dict) and event.get("type") == "result":
            self.final = event
        return [(EVENT_TYPE, event)]


def normalise(event: Any) -> list[dict[str, Any]]:
    """A `claude` event as normalised events."""
    if not isinstance(event, dict):
        return []
    kind = event.get("type")
    if kind == "system" and event.get("subtype") == "init":
        return [
            agent_event(
                EventKind.SESSION, session_id=event.get("session_id"), model=event.get("model")
            )
        ]
    if kind == "result":
        given = event.get("usage")
        usage: dict[str, Any] = given if isinstance(given, dict) else {}
        return [
            agent_event(
                EventKind.USAGE,
                input_tokens=usage.get("input_tokens"),
                output_tokens=usage.get("output_tokens"),
                cost_usd=event.get("total_cost_usd"),
            ),
            agent_event(
                EventKind.RESULT,
                text=event.get("result"),
                is_error=bool(event.get("is_error")),
            ),
        ]
    message = event.get("message")
    if kind not in ("assistant", "user") or not isinstance(message, dict):
        return []
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    normalised: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and kind == "assistant":
            normalised.append(agent_event(EventKind.TEXT, text=block.get("text", "")))
        elif block.get("type") == "tool_use":
            normalised.append(
                agent_event(
                    EventKind.TOOL_CALL,
                    id=block.get("id"),
                    name=block.get("name"),
                    input=block.get("input"),
                )
            )
        elif block.get("type") == "tool_result":
            normalised.append(
                agent_event(
                    EventKind.TOOL_RESULT,
                    id=block.get("tool_use_id"),
                    output=block.get("content"),
                    is_error=bool(block.get("is_error")),
                )
            )
    return normalised
