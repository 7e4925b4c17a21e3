"""Reading `codex exec --json`: each line a JSON event (`thread.started`, `turn.started`,
`item.started`/`item.updated`/`item.completed` with an item of a type — `agent_message`,
`reasoning`, `command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`,
`error` —, `turn.completed` with `usage`, `turn.failed`, `error`), posted as normalised `agent`
events (`EventKind`), and what the run amounts to kept as its final record:

`{"session_id", "model", "text" (the last agent message), "usage" (summed over the turns),
"cost_usd", "errors" (what the CLI said failed), "failed" (a turn failed), "completed" (a turn
completed)}`.
"""

from typing import Any

from bloom.worker.agents.base import EventKind, JsonLinesStream, agent_event
from bloom.worker.agents.prices import cost_usd

MAX_OUTPUT_CHARS = 20_000
"""A tool's output in a live event is cut to this (the whole of it stays in the CLI's own
session)."""
TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})


def _tool(item: dict[str, Any]) -> tuple[str, Any]:
    """A tool item's name and input, as a tool call reads."""
    kind = item.get("type")
    if kind == "command_execution":
        return "shell", {"command": item.get("command")}
    if kind == "file_change":
        return "file_change", {"changes": item.get("changes")}
    if kind == "mcp_tool_call":
        return f"mcp__{item.get('server')}__{item.get('tool')}", item.get("arguments")
    return str(kind), {"query": item.get("query")}


def _output(item: dict[str, Any]) -> tuple[Any, bool]:
    """A tool item's output and whether it failed."""
    kind = item.get("type")
    failed = item.get("status") == "failed"
    if kind == "command_execution":
        exit_code = item.get("exit_code")
        output: Any = str(item.get("aggregated_output") or "")[-MAX_OUTPUT_CHARS:]
        return output, failed or (isinstance(exit_code, int) and exit_code != 0)
    if kind == "mcp_tool_call":
        error = item.get("error")
        if error:
            return error.get("message") if isinstance(error, dict) else error, True
        return item.get("result"), failed
    if kind == "file_change":
        return item.get("changes"), failed
    return None, failed


class CodexStream(JsonLinesStream):
    """One run's stdout."""

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self.session_id: str | None = None
        self.text: str | None = None
        self.usage: dict[str, int] = {}
        self.errors: list[str] = []
        self.failed = False
        self.completed = False
        self.called: set[str] = set()
        """The tool items whose call was posted (their `item.started`)."""

    @property
    def final(self) -> dict[str, Any] | None:
        if self.session_id is None and not self.completed and not self.failed:
            return None
        return {
            "session_id": self.session_id,
            "model": self.model,
            "text": self.text,
            "usage": dict(self.usage),
            "cost_usd": self._cost(),
            "errors": list(self.errors),
            "failed": self.failed,
            "completed": self.completed,
        }

    def _cost(self) -> float | None:
        if not self.usage:
            return None
        return cost_usd(
            self.model,
            self.usage.get("input_tokens", 0),
            self.usage.get("cached_input_tokens", 0),
            self.usage.get("output_tokens", 0),
        )

    def read(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind == "thread.started":
            self.session_id = str(event.get("thread_id") or "") or None
            return [agent_event(EventKind.SESSION, session_id=self.session_id, model=self.model)]
        if kind in ("item.started", "item.completed"):
            item = event.get("item")
            return self._item(item, done=kind == "item.completed") if isinstance(item, dict) else []
        if kind == "turn.completed":
            return self._turn_completed(event.get("usage"))
        if kind == "turn.failed":
            self.failed = True
            error = event.get("error")
            message = str(error.get("message") if isinstance(error, dict) else error or "")
            if message and message not in self.errors:
                self.errors.append(message)
            return [agent_event(EventKind.RESULT, text=message, is_error=True)]
        if kind == "error":
            message = str(event.get("message") or "")
            self.errors.append(message)
            return [agent_event(EventKind.ERROR, message=message)]
        return []

    def _item(self, item: dict[str, Any], *, done: bool) -> list[dict[str, Any]]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind in TOOL_ITEMS:
            events = []
            if item_id not in self.called:
                self.called.add(item_id)
                name, tool_input = _tool(item)
                events.append(
                    agent_event(EventKind.TOOL_CALL, id=item_id, name=name, input=tool_input)
                )
            if done:
                output, is_error = _output(item)
                events.append(
                    agent_event(EventKind.TOOL_RESULT, id=item_id, output=output, is_error=is_error)
                )
            return events
        if not done:
            return []
        if kind == "agent_message":
            self.text = str(item.get("text") or "")
            return [agent_event(EventKind.TEXT, text=self.text)]
        if kind == "error":  # a warning of the CLI's; a failure comes as `turn.failed`
            return [agent_event(EventKind.ERROR, message=str(item.get("message") or ""))]
        return []

    def _turn_completed(self, usage: Any) -> list[dict[str, Any]]:
        self.completed = True
        given: dict[str, Any] = usage if isinstance(usage, dict) else {}
        for key, value in given.items():
            if isinstance(value, int):
                self.usage[key] = self.usage.get(key, 0) + value
        return [
            agent_event(
                EventKind.USAGE,
                input_tokens=self.usage.get("input_tokens"),
                output_tokens=self.usage.get("output_tokens"),
                cost_usd=self._cost(),
            ),
            agent_event(EventKind.RESULT, text=self.text, is_error=False),
        ]
