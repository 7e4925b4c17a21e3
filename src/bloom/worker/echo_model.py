"""A loopback stand-in for the Anthropic Messages API (and OpenAI's Responses API, for the Codex
CLI: `bloom.worker.echo_responses`; Google's Gemini API, for the Gemini CLI:
`bloom.worker.echo_gemini`) that answers every prompt with its echo.

`bloom up --demo-model` points the worker's Claude CLI at it (`ANTHROPIC_BASE_URL`), so the whole
pipeline can be seen working without an API key; the test suite uses it as the model, since the
network is closed there. It speaks what the CLI needs: `POST /v1/messages`, streaming (SSE) or
not, `POST /v1/messages/count_tokens`, and `/api/hello` (the reachability check it makes before
each run); what the Codex CLI needs, `POST /v1/responses` (streaming SSE); and what the Gemini
CLI needs, `POST /v1beta/models/{model}:streamGenerateContent` (and `:generateContent`,
`:countTokens`). Every other
path answers 404 in the API's error shape.

The answer is `echo: <last user text>`. A prompt may carry directives in double brackets, which
the tests use to script the model's behaviour; they are harmless in a demo:

- `[[sleep S]]`: wait S seconds before answering (for timeouts);
- `[[tokens N]]`: report N output tokens (for budgets);
- `[[overloaded]]`: answer 529 `overloaded_error`;
- `[[usage-limit EPOCH_S]]`: until that time, answer as the API does when a plan's usage limit
  is reached, with the reset time; after it, answer normally;
- `add a FILE saying TEXT` (the whole prompt, the demo's): as a `Bash` call writing TEXT and a
  newline to FILE (a plain name, in the run's directory);
- `[[tool NAME {JSON}]]` (one or more, in order): ask for a call of the tool NAME with that
  input, one per turn, as a model using tools does; a string `"$id"` in the input is the `id`
  of the previous tool's JSON result. Once each has its result, the answer is `echo: ` and the
  last result's text. The script is the newest prompt's: in a resumed conversation, the tool
  results of earlier turns do not count.

Every request body is kept in memory (`GET /_requests` lists them), so a test can check what the
CLI sent, for example that a resumed conversation carried the earlier turn.
"""

import asyncio
import hashlib
import json
import re
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bloom.worker import echo_git

DIRECTIVE = re.compile(r"\[\[(sleep|tokens|overloaded|usage-limit)(?:\s+([0-9.]+))?\]\]")
TOOL = re.compile(r"\[\[tool (\S+)(?: (\{.*?\}))?\]\]")
DEMO_EDIT = re.compile(
    r"add (?:a |an )?(?P<file>[\w-][\w.-]{0,99}) saying (?P<text>.{1,500})", re.IGNORECASE
)
MODEL = "claude-echo-1"
STREAM_CHUNK = 24
CONTINUE = "Continue from where you left off."
"""What the CLI adds beside a tool result when it resumes a deferred call."""


@dataclass(frozen=True, slots=True)
class Script:
    """What the directives in a prompt ask of the model."""

    sleep_sec: float = 0.0
    output_tokens: int | None = None
    overloaded: bool = False
    usage_limit_reset: int | None = None

    @classmethod
    def parse(cls, prompt: str) -> "Script":
        found = {name: value for name, value in DIRECTIVE.findall(prompt)}
        return cls(
            sleep_sec=float(found.get("sleep") or 0),
            output_tokens=int(found["tokens"]) if found.get("tokens") else None,
            overloaded="overloaded" in found,
            usage_limit_reset=int(float(found["usage-limit"]))
            if found.get("usage-limit")
            else None,
        )

    def limit_on(self, now: float) -> int | None:
        """The reset (epoch seconds) of the prompt's usage limit while it is on at `now`."""
        reset = self.usage_limit_reset
        return reset if reset is not None and now < reset else None


async def played(model: "EchoModel", body: dict[str, Any], prompt: str) -> Script:
    """The request recorded and its prompt's script played up to the answer (the sleep it asks
    for): what every API the echo model speaks does first."""
    model.requests.append(body)
    script = Script.parse(prompt)
    if script.sleep_sec:
        await asyncio.sleep(script.sleep_sec)
    return script


def echoed(prompt: str, results: list[str]) -> str:
    """The answer: the prompt echoed, or the last tool result once a scripted call ran."""
    return f"echo: {(results[-1] if results and TOOL.search(prompt) else prompt).strip()}"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def last_user_text(body: dict[str, Any]) -> str:
    """The newest prompt: the last text block of the user's messages (tool results carry none;
    the CLI's note on resuming a deferred call does not count). Only the last: a resumed
    session's turns are merged into one message, earlier prompts first."""
    for message in reversed(body.get("messages") or []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in reversed(blocks if isinstance(blocks, list) else []):
            text = block.get("text") if isinstance(block, dict) else None
            if isinstance(text, str) and text.strip() and text.strip() != CONTINUE:
                return text
    return ""


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


def script_key(prompt: str) -> str:
    """What the ids of a prompt's scripted calls start with. The CLI merges a resumed session's
    turns (a new prompt may come after the results of its own calls), so a result is known as
    the newest prompt's by its call's id, not by where it lies."""
    return f"toolu_echo_{hashlib.sha256(prompt.encode()).hexdigest()[:12]}_"


def tool_results(body: dict[str, Any], prompt: str) -> list[str]:
    """The text of each result of `prompt`'s scripted calls in the conversation, oldest first."""
    key = script_key(prompt)
    found: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_result"
                and str(block.get("tool_use_id", "")).startswith(key)
            ):
                found.append(_text_of(block.get("content")))
    return found


def demo_calls(prompt: str) -> list[tuple[str, str]]:
    """The demo's one sentence that edits (`add a hello.txt saying hi`): the shell call that
    writes the file in the run's directory, as a `[[tool Bash …]]` directive would ask."""
    found = DEMO_EDIT.fullmatch(prompt.strip())
    if found is None:
        return []
    name, text = found.group("file"), found.group("text").strip().strip("\"'")
    command = f"printf '%s\\n' {shlex.quote(text)} > {shlex.quote(name)}"
    return [("Bash", json.dumps({"command": command}))]


def next_tool_call(prompt: str, results: list[str]) -> ToolCall | None:
    """The prompt's next scripted tool call, or None when each has had its result."""
    calls = TOOL.findall(prompt) or demo_calls(prompt)
    if len(results) >= len(calls):
        return None
    name, raw = calls[len(results)]
    arguments = json.loads(raw) if raw else {}
    previous_id = _id_in(results[-1]) if results else None
    return ToolCall(
        f"{script_key(prompt)}{len(results)}",
        name,
        {k: previous_id if v == "$id" else v for k, v in arguments.items()},
    )


def _id_in(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    found = value.get("id") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": message}},
        status_code=status,
        headers=headers,
    )


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


@dataclass
class EchoModel:
    """The app's state: the requests it has seen."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    async def messages(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request_error", "body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "body must be an object")
        prompt = last_user_text(body)
        script = await played(self, body, prompt)
        if script.overloaded:
            return _error(529, "overloaded_error", "Overloaded", {"x-should-retry": "false"})
        if (reset := script.limit_on(time.time())) is not None:
            return _error(
                429,
                "rate_limit_error",
                f"Claude AI usage limit reached|{reset}",
                {
                    "x-should-retry": "false",
                    "anthropic-ratelimit-unified-status": "rejected",
                    "anthropic-ratelimit-unified-reset": str(reset),
                },
            )
        results = tool_results(body, prompt)
        call = next_tool_call(prompt, results)
        answer = echoed(prompt, results)
        input_tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        output_tokens = script.output_tokens or max(1, len(answer) // 4)
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            return StreamingResponse(
                self._stream(answer, call, model, input_tokens, output_tokens),
                media_type="text/event-stream",
            )
        block: dict[str, Any] = (
            {"type": "text", "text": answer}
            if call is None
            else {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": call.input,
            }
        )
        return JSONResponse(
            {
                "id": "msg_echo",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": "end_turn" if call is None else "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            }
        )

    @staticmethod
    async def _stream(
        answer: str, call: ToolCall | None, model: str, input_tokens: int, output_tokens: int
    ) -> AsyncIterator[str]:
        message: dict[str, Any] = {
            "id": "msg_echo",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        }
        yield _sse("message_start", {"type": "message_start", "message": message})
        if call is None:
            block: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": answer[start : start + STREAM_CHUNK]}
                for start in range(0, len(answer), STREAM_CHUNK)
            ]
        else:
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(call.input)}]
        start = {"type": "content_block_start", "index": 0, "content_block": block}
        yield _sse("content_block_start", start)
        for delta in deltas:
            yield _sse(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        stop_reason = "end_turn" if call is None else "tool_use"
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})

    async def responses(self, request: Request) -> Response:
        """OpenAI's Responses API, as the Codex CLI calls it (`bloom.worker.echo_responses`)."""
        from bloom.worker import echo_responses

        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request_error", "body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "body must be an object")
        return await echo_responses.responses(self, body)

    async def gemini(self, request: Request) -> Response:
        """Google's Gemini API, as the Gemini CLI calls it (`bloom.worker.echo_gemini`):
        `/v1beta/models/{model}:{method}`."""
        from bloom.worker import echo_gemini

        name, _, method = str(request.path_params["target"]).partition(":")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return echo_gemini.bad_request("body must be a JSON object")
        if method == "countTokens":
            return echo_gemini.count_tokens(body)
        if method in ("generateContent", "streamGenerateContent"):
            return await echo_gemini.generate(
                self, name, body, stream=method == "streamGenerateContent"
            )
        return echo_gemini.not_found(f"{method!r} is not served here")

    async def count_tokens(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        return JSONResponse({"input_tokens": max(1, len(json.dumps(body)) // 4)})

    async def seen(self, request: Request) -> Response:
        return JSONResponse(self.requests)

    async def hello(self, request: Request) -> Response:
        return JSONResponse({})

    async def not_found(self, request: Request) -> Response:
        return _error(404, "not_found_error", f"{request.url.path} is not served here")


def create_app(model: EchoModel | None = None, git_root: Path | None = None) -> Starlette:
    """The model's app; with `git_root`, the repositories there served at `/git/<name>.git`."""
    model = model or EchoModel()
    routes = [
        Route("/v1/messages", model.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", model.count_tokens, methods=["POST"]),
        Route("/v1/responses", model.responses, methods=["POST"]),
        Route("/v1beta/models/{target:path}", model.gemini, methods=["POST"]),
        Route("/api/hello", model.hello, methods=["GET"]),  # and HEAD
        Route("/_requests", model.seen, methods=["GET"]),
    ]
    if git_root is not None:
        root = git_root

        async def git(request: Request) -> Response:
            return await echo_git.serve(request, root)

        routes.append(Route("/git/{path:path}", git, methods=["GET", "POST"]))
    routes.append(Route("/{path:path}", model.not_found, methods=["GET", "POST", "PUT", "DELETE"]))
    return Starlette(routes=routes)
