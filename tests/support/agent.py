"""A stand-in node agent (the reference's `membridge-agent` surface: `POST /execute-task`,
`GET /health`, `POST /self-update`, `/restart`, `/uninstall`) served over real HTTP from a
thread: it records what it was sent and answers as a test tells it to, after holding the request
open for a while if asked (the reference agent answers only when the Claude CLI is done)."""

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.net import free_port


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True, "detail": "done"})
    hold_sec: float = 0.0


class StandInAgent:
    def __init__(self) -> None:
        self.port = free_port()
        self.answer = Answer()
        """How `/execute-task` answers."""
        self.answers: dict[str, Answer] = {}
        """How the other paths answer (by path; unset: `{"ok": true}`)."""
        self.calls: list[tuple[dict[str, str], Any]] = []
        self.other_calls: list[tuple[str, dict[str, str], Any]] = []
        app = Starlette(
            routes=[
                Route("/execute-task", self._execute, methods=["POST"]),
                Route("/health", self._other, methods=["GET"]),
                Route("/{action:str}", self._other, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _execute(self, request: Request) -> JSONResponse:
        self.calls.append((dict(request.headers), await request.json()))
        answer = self.answer
        await asyncio.sleep(answer.hold_sec)
        return JSONResponse(answer.body, status_code=answer.status)

    async def _other(self, request: Request) -> JSONResponse:
        body = await request.json() if await request.body() else None
        self.other_calls.append((request.url.path, dict(request.headers), body))
        answer = self.answers.get(request.url.path, Answer(body={"ok": True}))
        await asyncio.sleep(answer.hold_sec)
        return JSONResponse(answer.body, status_code=answer.status)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the stand-in agent did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
