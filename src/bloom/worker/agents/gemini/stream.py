"""Reading `gemini --output-format stream-json`: each line a JSON event (`init` with the
session's id and model, `message` — the user's prompt, then the assistant's text in `delta`s —,
`tool_use`, `tool_result`, `error` — a warning or an error, with its `severity` —, and `result`
with `status`, `error` and `stats`), posted as normalised `agent` events (`EventKind`), and what
the run amounts to kept as its final record:

`{"session_id", "model", "text" (the assistant's text since its last tool call), "usage"
(`input_tokens` with the cached ones, `cached_input_tokens`, `output_tokens` with thinking,
summed over the models the run used), "cost_usd", "errors" (what the CLI said failed), "failed",
"completed"}`.

The assistant's deltas are posted as one `text` event when its turn ends (a tool call, or the
result), as the other CLIs post a message.
"""

from typing import Any

from bloom.worker.agents.base import EventKind, JsonLinesStream, agent_event
from bloom.worker.agents.prices import cost_usd

MAX_OUTPUT_CHARS = 20_000
"""A tool's output in a live event is cut to this (the whole of it stays in the CLI's own
session)."""
AUTO = "auto"
"""The model `init` names when the CLI routes each turn to a model of its choosing."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def model_usage(stats: Any) -> dict[str, dict[str, int]]:
    """A `result`'s `stats` per model: `input_tokens` (with the cached ones),
    `cached_input_tokens`, `output_tokens` (the answer's and the thinking's: what is billed as
    output, `total_tokens` less the input)."""
    models = stats.get("models") if isinstance(stats, dict) else None
    found: dict[str, dict[str, int]] = {}
    for name, given in (models if isinstance(models, dict) else {}).items():
        if not isinstance(given, dict):
            continue
        inputs = _int(given.get("input_tokens"))
        outputs = max(_int(given.get("output_tokens")), _int(given.get("total_tokens")) - inputs)
        found[str(name)] = {
            "input_tokens": inputs,
            "cached_input_tokens": _int(given.get("cached")),
            "output_tokens": outputs,
        }
    return found


def run_cost(per_model: dict[str, dict[str, int]]) -> float | None:
    """What the run's tokens cost, summed over the models the price table knows; None when it
    knows none of those that used tokens."""
    costs = [
        cost_usd(name, use["input_tokens"], use["cached_input_tokens"], use["output_tokens"])
        for name, use in per_model.items()
        if use["input_tokens"] or use["output_tokens"]
    ]
    known = [cost for cost in costs if cost is not None]
    return sum(known) if known else None


class GeminiStream(JsonLinesStream):
    """One run's stdout."""

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self.session_id: str | None = None
        self.said = ""
        """The assistant's deltas since its last tool call."""
        self.text: str | None = None
        self.usage: dict[str, int] = {}
        self.per_model: dict[str, dict[str, int]] = {}
        self.errors: list[str] = []
        self.failed = False
        self.completed = False

    @property
    def final(self) -> dict[str, Any] | None:
        if self.session_id is None and not self.completed and not self.failed:
            return None
        return {
            "session_id": self.session_id,
            "model": self.model,
            "text": self.text,
            "usage": dict(self.usage),
            "cost_usd": run_cost(self.per_model),
            "errors": list(self.errors),
            "failed": self.failed,
            "completed": self.completed,
        }

    def read(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind == "init":
            self.session_id = str(event.get("session_id") or "") or None
            named = event.get("model")
            if isinstance(named, str) and named and not named.startswith(AUTO):
                self.model = named
            return [agent_event(EventKind.SESSION, session_id=self.session_id, model=self.model)]
        if kind == "message":
            if event.get("role") == "assistant":
                self.said += str(event.get("content") or "")
            return []
        if kind == "tool_use":
            tool_input = event.get("parameters")
            return [
                *self._said(),
                agent_event(
                    EventKind.TOOL_CALL,
                    id=str(event.get("tool_id") or ""),
                    name=str(event.get("tool_name") or ""),
                    input=tool_input if isinstance(tool_input, dict) else {},
                ),
            ]
        if kind == "tool_result":
            return [self._tool_result(event)]
        if kind == "error":
            message = str(event.get("message") or "")
            if event.get("severity") == "error":
                self.errors.append(message)
            return [agent_event(EventKind.ERROR, message=message)]
        if kind == "result":
            return self._result(event)
        return []

    def _said(self) -> list[dict[str, Any]]:
        """The assistant's text since its last tool call, as one event (once)."""
        if not self.said:
            return []
        self.text, self.said = self.said, ""
        return [agent_event(EventKind.TEXT, text=self.text)]

    @staticmethod
    def _tool_result(event: dict[str, Any]) -> dict[str, Any]:
        is_error = event.get("status") == "error"
        error = event.get("error")
        output: Any = event.get("output")
        if output is None and isinstance(error, dict):
            output = error.get("message")
        if isinstance(output, str):
            output = output[-MAX_OUTPUT_CHARS:]
        return agent_event(
            EventKind.TOOL_RESULT,
            id=str(event.get("tool_id") or ""),
            output=output,
            is_error=is_error,
        )

    def _result(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._said()
        self.per_model = model_usage(event.get("stats"))
        if self.model is None and self.per_model:  # routed: the last model used is the turn's
            self.model = list(self.per_model)[-1]
        self.usage = {
            key: sum(use[key] for use in self.per_model.values())
            for key in ("input_tokens", "cached_input_tokens", "output_tokens")
        }
        if event.get("status") == "success":
            self.completed = True
        else:
            self.failed = True
            error = event.get("error")
            message = str(error.get("message") if isinstance(error, dict) else error or "")
            if message and message not in self.errors:
                self.errors.append(message)
        cost = run_cost(self.per_model)
        if self.usage.get("input_tokens") or self.usage.get("output_tokens"):
            events.append(
                agent_event(
                    EventKind.USAGE,
                    input_tokens=self.usage["input_tokens"],
                    output_tokens=self.usage["output_tokens"],
                    cost_usd=cost,
                )
            )
        if self.failed:
            events.append(
                agent_event(
                    EventKind.RESULT, text=self.errors[-1] if self.errors else "", is_error=True
                )
            )
        else:
            events.append(agent_event(EventKind.RESULT, text=self.text, is_error=False))
        return events
