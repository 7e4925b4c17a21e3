"""A stand-in node agent (the reference's `membridge-agent` surface: `POST /execute-task`,
`GET /health`, `POST /self-update`, `/restart`, `/uninstall`, `/clone`, `/sync/push`, …) served
over real HTTP from a thread: it records what it was sent and answers as a test tells it to,
after holding the request open for a while if asked (the reference agent answers only when the
Claude CLI is done), and counts how many requests it held open at once."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bloom.worker.agent_http import Refusal
from tests.support.threaded import ThreadedServer


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True, "detail": "done"})
    hold_sec: float = 0.0


class StandInAgent(ThreadedServer):
    def __init__(self) -> None:
        self.answer = Answer()
        """How `/execute-task` answers."""
        self.answers: dict[str, Answer] = {}
        """How the other paths answer (by path; unset: `{"ok": true}`)."""
        self.calls: list[tuple[dict[str, str], Any]] = []
        self.other_calls: list[tuple[str, dict[str, str], Any]] = []
        self.open_calls = 0
        self.most_at_once = 0
        """The most calls (other than `/execute-task`) it held open at the same time."""
        app = Starlette(
            routes=[
                Route("/execute-task", self._execute, methods=["POST"]),
                Route("/health", self._other, methods=["GET"]),
                Route("/{action:path}", self._other, methods=["POST"]),
            ]
        )
        super().__init__(app)

    async def _execute(self, request: Request) -> JSONResponse:
        self.calls.append((dict(request.headers), await request.json()))
        answer = self.answer
        await asyncio.sleep(answer.hold_sec)
        return JSONResponse(answer.body, status_code=answer.status)

    async def _other(self, request: Request) -> JSONResponse:
        body = await request.json() if await request.body() else None
        self.other_calls.append((request.url.path, dict(request.headers), body))
        answer = self.answers.get(request.url.path, Answer(body={"ok": True}))
        self.open_calls += 1
        self.most_at_once = max(self.most_at_once, self.open_calls)
        try:
            await asyncio.sleep(answer.hold_sec)
        finally:
            self.open_calls -= 1
        return JSONResponse(answer.body, status_code=answer.status)


async def runs_nothing(_: str) -> Refusal:
    """A worker's `start` for an agent surface under test that runs no task."""
    return Refusal(503, "No free slot")
