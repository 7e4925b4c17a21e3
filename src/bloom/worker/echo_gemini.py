"""The echo model's Gemini API (`POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent?alt=sse`, `:countTokens`), as the Gemini CLI calls it when
`GOOGLE_GEMINI_BASE_URL` points at the echo model (any `GEMINI_API_KEY` will do).

The same answer and the same directives as the Messages API (`bloom.worker.echo_model`): the
answer is `echo: <newest prompt>`; `[[sleep S]]`, `[[tokens N]]`, `[[overloaded]]` (a 503
`UNAVAILABLE`, as the API says a model is overloaded), `[[usage-limit EPOCH_S]]` (a 429
`RESOURCE_EXHAUSTED` whose `RetryInfo` and text say how long until the reset, as the API's quota
errors do), and `[[tool NAME {JSON}]]` (a `functionCall` part per turn, NAME being one of the
CLI's own tools, e.g. `run_shell_command` with `{"command": "…"}`; once each has its
`functionResponse`, the answer is `echo: ` and the last response's output).

A request for JSON (`responseMimeType: application/json`, as the CLI's own calls are: its choice
of a model for the turn when none is named, its checks) is answered with the smallest object
its schema allows, the echo in its strings.
"""

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from bloom.worker import echo_model as echo

HARNESS_PREFIXES = ("<session_context>", "<system-reminder>", "<state_snapshot>")
"""The user-role texts the CLI adds of its own (not the prompt)."""


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def newest_prompt(body: dict[str, Any]) -> str:
    """The last user text of the request's `contents` that the CLI did not add of its own."""
    contents = body.get("contents")
    for content in reversed(contents if isinstance(contents, list) else []):
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        for part in reversed(_parts(content)):
            text = part.get("text")
            if (
                isinstance(text, str)
                and text.strip()
                and not text.lstrip().startswith(HARNESS_PREFIXES)
            ):
                return text
    return ""


def _output_of(response: Any) -> str:
    """A `functionResponse.response` as text (the CLI sends `{"output": …}` or `{"error": …}`)."""
    if isinstance(response, dict):
        for key in ("output", "error", "content"):
            value = response.get(key)
            if isinstance(value, str):
                return value
    return response if isinstance(response, str) else json.dumps(response)


def call_outputs(body: dict[str, Any], prompt: str) -> list[str]:
    """The outputs of `prompt`'s scripted calls in the request's `contents`, oldest first."""
    key = echo.script_key(prompt)
    found: list[str] = []
    for content in body.get("contents") or []:
        for part in _parts(content):
            response = part.get("functionResponse")
            if isinstance(response, dict) and str(response.get("id", "")).startswith(key):
                found.append(_output_of(response.get("response")))
    return found


def _error(status: int, code: str, message: str, details: list[Any] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": status, "message": message, "status": code, "details": details or []}},
        status_code=status,
    )


def usage_limit(reset: int) -> JSONResponse:
    """The API's answer when a quota is spent, saying how long until `reset` (epoch s)."""
    seconds = max(1, int(reset - time.time()))
    return _error(
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan and billing details. "
        "* Quota exceeded for metric: "
        "generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 50\n"
        f"Please retry in {seconds}s.",
        [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerProjectPerModel-FreeTier",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds}s"},
        ],
    )


async def generate(
    model: "echo.EchoModel", name: str, body: dict[str, Any], *, stream: bool
) -> Response:
    """One `generateContent` (or its streaming twin) for the model `name`."""
    prompt = newest_prompt(body)
    script = await echo.played(model, body, prompt)
    if script.overloaded:
        return _error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
    if (reset := script.limit_on(time.time())) is not None:
        return usage_limit(reset)
    results = call_outputs(body, prompt)
    call = echo.next_tool_call(prompt, results)
    answer = echo.echoed(prompt, results)
    prompt_tokens = max(1, len(json.dumps(body.get("contents", []))) // 4)
    output_tokens = script.output_tokens or max(1, len(answer) // 4)
    usage = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt_tokens + output_tokens,
    }
    config = body.get("generationConfig")
    config = config if isinstance(config, dict) else {}
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        answer, call = json.dumps(instance(schema, answer)), None
    if not stream:
        return JSONResponse(_chunk(name, [_part(answer, call)], usage, finished=True))
    return StreamingResponse(_stream(name, answer, call, usage), media_type="text/event-stream")


def instance(schema: Any, text: str) -> Any:
    """The smallest value `schema` (the API's OpenAPI subset, or JSON Schema) allows: its
    first `enum` value, `text` for a string, 1 for a number, its required properties."""
    if not isinstance(schema, dict):
        return text
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = str(schema.get("type") or "string").lower()
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = required if isinstance(required, list) else list(properties)
        return {str(name): instance(properties.get(name), text) for name in names}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return text


def _part(text: str, call: "echo.ToolCall | None") -> dict[str, Any]:
    if call is None:
        return {"text": text}
    return {"functionCall": {"id": call.id, "name": call.name, "args": call.input}}


def _chunk(
    name: str, parts: list[dict[str, Any]], usage: dict[str, int], *, finished: bool
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finished:
        candidate["finishReason"] = "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": name,
        "responseId": "echo",
    }


async def _stream(
    name: str, answer: str, call: "echo.ToolCall | None", usage: dict[str, int]
) -> AsyncIterator[str]:
    if call is not None:
        chunks = [[_part("", call)]]
    else:
        chunks = [
            [{"text": answer[start : start + echo.STREAM_CHUNK]}]
            for start in range(0, len(answer), echo.STREAM_CHUNK)
        ] or [[{"text": ""}]]
    for index, parts in enumerate(chunks):
        data = _chunk(name, parts, usage, finished=index == len(chunks) - 1)
        yield f"data: {json.dumps(data)}\r\n\r\n"


def count_tokens(body: dict[str, Any]) -> Response:
    """`countTokens`: about four characters a token."""
    return JSONResponse({"totalTokens": max(1, len(json.dumps(body.get("contents", []))) // 4)})


def bad_request(message: str) -> JSONResponse:
    return _error(400, "INVALID_ARGUMENT", message)


def not_found(message: str) -> JSONResponse:
    return _error(404, "NOT_FOUND", message)
