"""A typed client for the runtime's HTTP API, shared by the worker and the `bloom` CLI.

A 429, and a 503 with `Retry-After` (the runtime's database unreachable, say), is waited out
(as long as `Retry-After` says, with jitter) and retried a few times. Replies are
parsed into the frozen values of `bloom.clients.wire`. Calls raise `RuntimeApiError` for an error
reply (with the runtime's message, never a stack trace), `RuntimeContractError` for a reply
without the shape the client reads, and `RuntimeUnreachable` when the runtime cannot be reached.
The API key travels in the `X-Runtime-API-Key` header and nowhere else.

The base URL may name several replicas, comma-separated (`http://a:5000,http://b:5000`): a call
whose connection is refused or times out goes to the next one, and the client stays there.
"""

import asyncio
import contextlib
import json
import random
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from bloom.clients.fields import Fields, Parser, WireError, parse_body, parse_list
from bloom.clients.wire import (
    ArtifactInfo,
    CallerInfo,
    CompleteReply,
    CompleteRequest,
    EventsAccepted,
    Grant,
    Health,
    HeartbeatReply,
    HeartbeatRequest,
    TaskInfo,
    WorkerInfo,
)

API_KEY_HEADER = "X-Runtime-API-Key"
RATE_LIMIT_RETRIES = 3
"""A 429 or a 503 with Retry-After is waited out this many times before it is an error."""
MAX_RETRY_AFTER_SEC = 30.0
T = TypeVar("T")


def _retry_after(response: httpx.Response) -> float | None:
    """How long to wait before trying again, if the answer asks for that: a 429, or a 503 with
    `Retry-After` (seconds, within bounds, plus up to a fifth more so that callers spread)."""
    if response.status_code == 503 and "retry-after" not in response.headers:
        return None  # e.g. no worker with a free slot: an answer, not an outage
    if response.status_code not in (429, 503):
        return None
    try:
        wait = min(max(float(response.headers.get("retry-after", "1")), 0.1), MAX_RETRY_AFTER_SEC)
    except ValueError:
        wait = 1.0
    return wait * random.uniform(1.0, 1.2)


class RuntimeUnreachable(Exception):
    """The runtime did not answer (connection refused, timeout, broken stream)."""


class RuntimeApiError(Exception):
    """The runtime answered with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class RuntimeContractError(RuntimeApiError):
    """The runtime answered, but not in the shape this client reads (a field renamed, missing or
    of another type: a runtime of another version)."""


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One entry of a task's live output, as the events stream delivers it."""

    seq: int
    type: str
    data: Any


@dataclass(frozen=True, slots=True)
class Download:
    size: int | None
    chunks: AsyncIterator[bytes]


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return error
    if isinstance(error, dict):  # the seed's validation shape
        fields = [
            f"{name}: {'; '.join(msgs)}" for name, msgs in error.get("fieldErrors", {}).items()
        ]
        return "; ".join([*error.get("formErrors", []), *fields]) or "invalid request"
    return json.dumps(body)[:500]


def replica_urls(base_url: str) -> list[str]:
    """The runtime URLs in `base_url` (one, or several comma-separated), without trailing /."""
    urls = [url.strip().rstrip("/") for url in base_url.split(",")]
    return [url for url in urls if url] or [base_url]


def _trust(replicas: list[str]) -> ssl.SSLContext | bool:
    """What the client's TLS connections to the runtime trust: httpx's default (certifi's
    bundle) when a replica is https. With none, no connection to the runtime uses TLS (redirects
    are not followed), and a context that trusts nothing spares loading the bundle: 20 ms of
    every `bloom` command that calls the runtime. (A proxy's TLS keeps httpx's default.)"""
    if any(url.lower().startswith("https://") for url in replicas):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class RuntimeClient:
    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        timeout_sec: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        headers = {API_KEY_HEADER: api_key} if api_key else {}
        self._replicas = replica_urls(base_url)
        self._current = 0
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=timeout_sec,
            transport=transport,
            verify=_trust(self._replicas),
        )

    @property
    def base_url(self) -> str:
        """The replica calls go to now."""
        return self._replicas[self._current]

    def _url(self, path: str) -> str:
        return f"{self.base_url}/api/runtime{path}"

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "RuntimeClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        timeout_sec: float | None = None,
    ) -> httpx.Response:
        extra: dict[str, Any] = {} if timeout_sec is None else {"timeout": timeout_sec}
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            response = await self._send(method, path, json=body, params=params, **extra)
            wait = _retry_after(response)
            if wait is None or attempt == RATE_LIMIT_RETRIES:
                break
            await asyncio.sleep(wait)
        if response.status_code >= 400:
            raise RuntimeApiError(response.status_code, _message(response))
        return response

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; one that could not connect goes to each other replica in turn."""
        refused = 0
        while True:
            try:
                return await self._http.request(method, self._url(path), **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                refused += 1
                if refused == len(self._replicas):
                    raise RuntimeUnreachable(f"{type(exc).__name__}: {exc}") from None
                self._current = (self._current + 1) % len(self._replicas)
            except httpx.HTTPError as exc:
                raise RuntimeUnreachable(f"{type(exc).__name__}: {exc}") from None

    async def _parsed(self, parse: Parser[T], method: str, path: str, **kwargs: Any) -> T:
        response = await self._call(method, path, **kwargs)
        return _parse(response, parse, f"{method} {path}")

    # reading and steering, for people

    async def health(self) -> Health:
        return await self._parsed(Health.from_json, "GET", "/health")

    async def whoami(self) -> CallerInfo:
        return await self._parsed(CallerInfo.from_json, "GET", "/session")

    async def stats(self) -> Mapping[str, Any]:
        """The seed's counts: `tasks` by status (and `total`), `leases`, `workers`."""
        return await self._parsed(_object, "GET", "/stats")

    async def usage(
        self, group_by: str, *, since: str | None, until: str | None, limit: int
    ) -> Mapping[str, Any]:
        """Usage summed per group over [since, until) (`GET /usage`; the server's defaults
        for a bound left out: today's UTC midnight, now)."""
        window = {"from": since, "to": until}
        params = {"group_by": group_by, "limit": limit} | {
            key: value for key, value in window.items() if value is not None
        }
        return await self._parsed(_object, "GET", "/usage", params=params)

    async def budgets(self) -> list[Mapping[str, Any]]:
        """Every budget with its spend (`GET /budgets`)."""
        return await self._parsed(_list_of(_object), "GET", "/budgets")

    async def set_budget(
        self, project: str, *, daily_usd: float | None, monthly_usd: float | None
    ) -> Mapping[str, Any]:
        body = {"daily_usd": daily_usd, "monthly_usd": monthly_usd}
        return await self._parsed(_object, "PUT", f"/budgets/{quote(project, safe='')}", body=body)

    async def remove_budget(self, project: str) -> None:
        await self._call("DELETE", f"/budgets/{quote(project, safe='')}")

    async def tool_policy(self, project: str) -> Mapping[str, Any]:
        """A project's default tool policy (`GET /tool-policies/{project}`)."""
        return await self._parsed(_object, "GET", f"/tool-policies/{quote(project, safe='')}")

    async def set_tool_policy(self, project: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        path = f"/tool-policies/{quote(project, safe='')}"
        return await self._parsed(_object, "PUT", path, body=body)

    async def remove_tool_policy(self, project: str) -> None:
        await self._call("DELETE", f"/tool-policies/{quote(project, safe='')}")

    async def approvals(
        self, *, status: str | None = None, task_id: str | None = None, limit: int = 100
    ) -> list[Mapping[str, Any]]:
        """Tool calls waiting for a person, and those decided (`GET /approvals`)."""
        params = {"limit": str(limit)}
        params |= {"status": status} if status else {}
        params |= {"task_id": task_id} if task_id else {}
        return await self._parsed(_list_of(_object), "GET", "/approvals", params=params)

    async def decide_approval(
        self, approval_id: str, decision: str, *, note: str | None = None, remember: bool = False
    ) -> Mapping[str, Any]:
        """Approve or deny a pending call (`POST /approvals/{id}/decision`)."""
        body = {"decision": decision, "note": note, "remember": remember}
        path = f"/approvals/{quote(approval_id, safe='')}/decision"
        return await self._parsed(_object, "POST", path, body=body)

    async def audit(
        self, *, task_id: str | None = None, limit: int = 100
    ) -> list[Mapping[str, Any]]:
        """Audit entries, newest first (`GET /audit`), a task's only with `task_id`."""
        params = {"limit": str(limit)} | ({"task_id": task_id} if task_id else {})
        return await self._parsed(_list_of(_object), "GET", "/audit", params=params)

    async def decisions(self, task_id: str, lease_id: str) -> list[Mapping[str, Any]]:
        """What the task's run of `lease_id` applies, taken by it (`POST
        /llm-tasks/{id}/decisions`)."""
        path = f"/llm-tasks/{task_id}/decisions"
        found = await self._parsed(_object, "POST", path, body={"lease_id": lease_id})
        return [dict(ruling) for ruling in found.get("decisions") or []]

    async def create_task(self, body: Mapping[str, Any]) -> TaskInfo:
        return await self._parsed(TaskInfo.from_json, "POST", "/llm-tasks", body=body)

    async def create_tasks(self, bodies: list[Mapping[str, Any]]) -> list[TaskInfo]:
        """A batch, all or none (`POST /llm-tasks/batch`): its tasks in order."""

        def tasks(data: Any, where: str) -> list[TaskInfo]:
            return _list_of(TaskInfo.from_json)(_object(data, where).get("tasks"), where)

        return await self._parsed(tasks, "POST", "/llm-tasks/batch", body={"tasks": bodies})

    async def list_tasks(
        self, *, status: str | None = None, limit: int = 50, cli: str | None = None
    ) -> list[TaskInfo]:
        params: dict[str, Any] = {"limit": limit} | ({"status": status} if status else {})
        params |= {"cli": cli} if cli else {}
        tasks = _list_of(TaskInfo.from_json)
        return await self._parsed(tasks, "GET", "/llm-tasks", params=params)

    async def get_task(self, task_id: str) -> TaskInfo:
        return await self._parsed(TaskInfo.from_json, "GET", f"/llm-tasks/{task_id}")

    async def cancel_task(self, task_id: str) -> TaskInfo:
        return await self._parsed(TaskInfo.from_json, "POST", f"/llm-tasks/{task_id}/cancel")

    async def requeue_task(self, task_id: str) -> TaskInfo:
        return await self._parsed(TaskInfo.from_json, "POST", f"/llm-tasks/{task_id}/requeue")

    async def artifacts(self, task_id: str) -> list[ArtifactInfo]:
        artifacts = _list_of(ArtifactInfo.from_json)
        return await self._parsed(artifacts, "GET", "/artifacts", params={"task_id": task_id})

    async def artifact(self, artifact_id: str) -> ArtifactInfo:
        return await self._parsed(ArtifactInfo.from_json, "GET", f"/artifacts/{artifact_id}")

    async def artifact_content(self, artifact_id: str) -> str:
        return (await self._call("GET", f"/artifacts/{artifact_id}/content")).text

    @contextlib.asynccontextmanager
    async def artifact_download(self, artifact_id: str) -> AsyncIterator[Download]:
        """An artifact's content as it streams, with its size (for a progress bar)."""
        try:
            async with self._http.stream(
                "GET", self._url(f"/artifacts/{artifact_id}/content")
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise RuntimeApiError(response.status_code, _message(response))
                length = response.headers.get("content-length")
                yield Download(int(length) if length else None, response.aiter_bytes())
        except httpx.HTTPError as exc:
            raise RuntimeUnreachable(f"{type(exc).__name__}: {exc}") from None

    async def list_workers(self) -> list[WorkerInfo]:
        return await self._parsed(_list_of(WorkerInfo.from_json), "GET", "/workers")

    async def approve_worker_url(self, worker_id: str, url: str | None) -> WorkerInfo:
        """The agent URL the worker proposed becomes the one the runtime calls (admins)."""
        path = f"/workers/{quote(worker_id, safe='')}/approve-url"
        body = {"url": url} if url is not None else {}
        return await self._parsed(WorkerInfo.from_json, "POST", path, body=body)

    async def events(
        self, task_id: str, *, after: int = 0, follow: bool = True
    ) -> AsyncIterator[TaskEvent]:
        """The task's events after `after`, as they arrive; ends when the task has ended (or at
        once when not following). The final `end` event carries the task's status."""
        params = {"follow": "true" if follow else "false"}
        headers = {"Last-Event-ID": str(after), "Accept": "text/event-stream"}
        try:
            async with self._http.stream(
                "GET",
                self._url(f"/llm-tasks/{task_id}/events"),
                params=params,
                headers=headers,
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise RuntimeApiError(response.status_code, _message(response))
                async for event in _parse_sse(response.aiter_lines()):
                    yield event
        except httpx.HTTPError as exc:
            raise RuntimeUnreachable(f"{type(exc).__name__}: {exc}") from None

    # the worker's protocol

    async def register_worker(self, body: Mapping[str, Any]) -> WorkerInfo:
        return await self._parsed(WorkerInfo.from_json, "POST", "/workers", body=body)

    async def claim(
        self, worker_id: str, *, wait_sec: float, ttl_sec: int | None = None
    ) -> Grant | None:
        """A grant (lease and task), or None when no work came within `wait_sec`."""
        body: dict[str, Any] = {"wait_seconds": wait_sec}
        if ttl_sec is not None:
            body["ttl_seconds"] = ttl_sec
        path = f"/workers/{worker_id}/claim"
        response = await self._call("POST", path, body=body, timeout_sec=wait_sec + 30)
        if response.status_code == 204:
            return None
        return _parse(response, Grant.from_json, f"POST {path}")

    async def granted(self, worker_id: str, lease_id: str) -> Grant:
        """The active lease `lease_id` this worker holds, with its task, as the runtime has it."""
        path = f"/workers/{quote(worker_id, safe='')}/leases/{quote(lease_id, safe='')}"
        return await self._parsed(Grant.from_json, "GET", path)

    async def heartbeat(self, task_id: str, request: HeartbeatRequest) -> HeartbeatReply:
        path = f"/llm-tasks/{task_id}/heartbeat"
        return await self._parsed(HeartbeatReply.from_json, "POST", path, body=request.to_json())

    async def send_events(
        self, task_id: str, lease_id: str, worker_id: str, events: list[dict[str, Any]]
    ) -> EventsAccepted:
        body = {"lease_id": lease_id, "worker_id": worker_id, "events": events}
        path = f"/llm-tasks/{task_id}/events"
        return await self._parsed(EventsAccepted.from_json, "POST", path, body=body)

    async def workspace_history(self, task_id: str, *, patches: bool) -> Mapping[str, Any]:
        """The task's branch as its tasks left it (`GET /llm-tasks/{id}/workspace`)."""
        params = {"patches": "true"} if patches else {}
        path = f"/llm-tasks/{task_id}/workspace"
        return await self._parsed(_object, "GET", path, params=params)

    async def complete(self, task_id: str, request: CompleteRequest) -> CompleteReply:
        path = f"/llm-tasks/{task_id}/complete"
        return await self._parsed(CompleteReply.from_json, "POST", path, body=request.to_json())


def _object(data: Any, where: str) -> Mapping[str, Any]:
    """A JSON object as it came (fields read by the caller)."""
    return Fields(data, where).data


def _list_of(parse: Parser[T]) -> Parser[list[T]]:
    return lambda data, where: parse_list(data, parse, where)


def _parse(response: httpx.Response, parse: Parser[T], call: str) -> T:
    """The reply's JSON body read by `parse`; RuntimeContractError, naming the field, if it
    cannot be."""
    try:
        return parse_body(response.content, parse)
    except WireError as exc:
        raise RuntimeContractError(
            response.status_code, f"unexpected reply to {call}: {exc}"
        ) from None


async def _parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[TaskEvent]:
    """Server-Sent Events into `TaskEvent`s; comments (keep-alives) are skipped."""
    event_id, event_type = "", "message"
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                payload = json.loads("\n".join(data))
                seq = int(event_id) if event_id.isdigit() else 0
                inner = payload.get("data", payload) if isinstance(payload, dict) else payload
                yield TaskEvent(seq=seq, type=event_type, data=inner)
            event_id, event_type, data = "", "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                event_id = value
            elif name == "event":
                event_type = value
            elif name == "data":
                data.append(value)
