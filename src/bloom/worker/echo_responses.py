"""The echo model's OpenAI Responses API (`POST /v1/responses`, streaming SSE), as the Codex CLI
calls it through a provider whose `base_url` is the echo model's `/v1` (`wire_api =
"responses"`).

The same answer and the same directives as the Messages API (`bloom.worker.echo_model`): the
answer is `echo: <newest prompt>`; `[[sleep S]]`, `[[tokens N]]`, `[[overloaded]]` (a 500, as
OpenAI's API says it is overloaded), `[[usage-limit EPOCH_S]]` (a 429 `usage_limit_reached`
with `resets_at`, as the ChatGPT plan's limit does), and `[[tool NAME {JSON}]]` (a
`function_call` item per turn, NAME being one of the CLI's own tools, e.g. `exec_command` with
`{"cmd": "…"}`; once each has its `function_call_output`, the answer is `echo: ` and the last
output).
"""

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from bloom.worker import echo_model as echo

MODEL = "gpt-echo-1"
HARNESS_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md")
"""The user-role texts the CLI adds of its own (not the prompt)."""


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    ]


def newest_prompt(body: dict[str, Any]) -> str:
    """The last user text of the request's `input` that the CLI did not add of its own."""
    items = body.get("input")
    if isinstance(items, str):
        return items
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        for text in reversed(_texts(item.get("content"))):
            if text.strip() and not text.lstrip().startswith(HARNESS_PREFIXES):
                return text
    return ""


def call_outputs(body: dict[str, Any], prompt: str) -> list[str]:
    """The outputs of `prompt`'s scripted calls in the request's `input`, oldest first."""
    key = echo.script_key(prompt)
    found: list[str] = []
    for item in body.get("input") or []:
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and str(item.get("call_id", "")).startswith(key)
        ):
            output = item.get("output")
            found.append(output if isinstance(output, str) else "\n".join(_texts(output)))
    return found


def _error(status: int, kind: str, message: str, **more: Any) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": kind, "code": kind, "message": message, "param": None, **more}},
        status_code=status,
    )


def _sse(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


async def responses(model: "echo.EchoModel", body: dict[str, Any]) -> Response:
    """One `POST /v1/responses`."""
    prompt = newest_prompt(body)
    script = await echo.played(model, body, prompt)
    if script.overloaded:
        return _error(500, "server_error", "The server is overloaded, try again later")
    if (reset := script.limit_on(time.time())) is not None:
        return _error(
            429,
            "usage_limit_reached",
            "The usage limit has been reached",
            plan_type="plus",
            resets_at=reset,
            resets_in_seconds=max(0, int(reset - time.time())),
        )
    results = call_outputs(body, prompt)
    call = echo.next_tool_call(prompt, results)
    answer = echo.echoed(prompt, results)
    input_tokens = max(1, len(json.dumps(body.get("input", []))) // 4)
    output_tokens = script.output_tokens or max(1, len(answer) // 4)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    name = str(body.get("model") or MODEL)
    if not body.get("stream"):
        return JSONResponse(_response(name, "completed", [_item(answer, call)], usage))
    return StreamingResponse(_stream(name, answer, call, usage), media_type="text/event-stream")


def _item(answer: str, call: "echo.ToolCall | None") -> dict[str, Any]:
    if call is not None:
        return {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.input),
            "status": "completed",
        }
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": answer, "annotations": []}],
    }


def _response(
    name: str, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": "resp_echo",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": name,
        "output": output,
        "usage": usage,
    }


async def _stream(
    name: str, answer: str, call: "echo.ToolCall | None", usage: dict[str, Any]
) -> AsyncIterator[str]:
    yield _sse({"type": "response.created", "response": _response(name, "in_progress", [], None)})
    item = _item(answer, call)
    if call is None:
        started = item | {"status": "in_progress", "content": []}
        yield _sse({"type": "response.output_item.added", "output_index": 0, "item": started})
        for start in range(0, len(answer), echo.STREAM_CHUNK):
            yield _sse(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": answer[start : start + echo.STREAM_CHUNK],
                }
            )
    else:
        yield _sse({"type": "response.output_item.added", "output_index": 0, "item": item})
    yield _sse({"type": "response.output_item.done", "output_index": 0, "item": item})
    yield _sse(
        {"type": "response.completed", "response": _response(name, "completed", [item], usage)}
    )
