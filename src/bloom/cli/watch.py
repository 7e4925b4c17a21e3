"""Following one task for a person: its progress (queued → leased to <worker> → running, with the
time elapsed), its live output from the events stream, and then its answer.

`TaskView` renders; `follow` drives it from the runtime until the task has ended, and
`follow_to_answer` fetches the answer after. `bloom task submit --wait` and `bloom task watch`
import this module when they run.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from bloom.clients.wire import TaskInfo, answers
from bloom.domain.states import TERMINAL, TaskStatus

if TYPE_CHECKING:  # the client (httpx) is imported when a command calls the runtime
    from bloom.clients.runtime import RuntimeClient, TaskEvent

POLL_SEC = 1.0
SETTLE_SEC = 3.0  # after the task ended, how long the events stream may take to deliver the rest
STREAM_RETRIES = 5


class TaskView:
    """Renders a task's progress and events on `console` (stderr: stdout keeps the answer)."""

    def __init__(
        self,
        console: Console,
        *,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ):
        self.console = console
        self.clock = clock
        self.started = clock() if started is None else started
        self.last: tuple[str, str | None] | None = None
        self.spinner: Status | None = None
        self.streamed = False  # whether any live output arrived

    # progress

    def submitted(self, task: TaskInfo) -> None:
        """The line that opens `bloom task submit --wait`: the new task, its context and agent."""
        self.console.print(
            f"[dim]task {task.id} · context {escape(task.context_id)} · "
            f"agent {escape(task.agent_slug)}[/]"
        )

    def elapsed(self) -> str:
        return f"{self.clock() - self.started:5.1f}s"

    def note(self, text: str, style: str = "") -> None:
        """One progress line, `  3.2s queued`."""
        body = f"[{style}]{text}[/]" if style else text
        self.console.print(f"[dim]{self.elapsed()}[/] {body}")

    def status(self, task: TaskInfo) -> None:
        """Say so when the task's status (or its worker) changed since the last call."""
        status, worker = str(task.status), task.worker_id
        key = (status, worker if status in ("leased", "running") else None)
        if key != self.last:
            previous, self.last = self.last, key
            self.note(self.describe(task, previous))
        self.tick(task)

    @staticmethod
    def describe(task: TaskInfo, previous: tuple[str, str | None] | None) -> str:
        status, worker = str(task.status), escape(task.worker_id or "?")
        if status == "queued":
            if previous is not None and previous[0] in ("leased", "running"):
                reason = f": {escape(task.last_error)}" if task.last_error else ""
                attempt = task.attempts + 1
                return f"[yellow]queued again[/] for attempt {attempt}{reason}"
            return "[blue]queued[/]"
        if status == "leased":
            return f"[cyan]leased to {worker}[/]"
        if status == "running":
            return f"[cyan]running[/] on {worker}"
        style = "green" if status == "completed" else "yellow" if status == "cancelled" else "red"
        return f"[{style}]{escape(status)}[/]"

    def tick(self, task: TaskInfo | None = None) -> None:
        """Refresh the spinner line (on a terminal only)."""
        if self.spinner is not None:
            status = self.last[0] if self.last else "waiting"
            self.spinner.update(f"[dim]{status} · {self.elapsed().strip()}[/]")

    # events

    def event(self, event: "TaskEvent") -> None:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "started":
            attempt = data.get("attempt")
            worker = escape(str(data.get("worker_id") or "?"))
            self.last = ("running", data.get("worker_id"))  # the poll need not say it again
            resumed = ", resuming this context's session" if data.get("resumed_session") else ""
            self.note(f"[cyan]started[/] on {worker}, attempt {attempt}{resumed}")
        elif event.type == "claude":
            self.claude(data)
        elif event.type == "stderr":
            self.console.print(f"[dim]{escape(str(data.get('line', '')))}[/]")
        elif event.type == "finished":
            self.finished(data)

    def claude(self, message: dict[str, Any]) -> None:
        """One object of the CLI's stream-json: assistant text and tool calls, API retries."""
        kind = message.get("type")
        if kind == "assistant":
            body = message.get("message")
            blocks = body.get("content") if isinstance(body, dict) else None
            for block in blocks if isinstance(blocks, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and str(block.get("text", "")).strip():
                    self.streamed = True
                    self.console.print(str(block["text"]), markup=False)
                elif block.get("type") == "tool_use":
                    self.console.print(f"[dim]→ tool {escape(str(block.get('name', '?')))}[/]")
        elif kind == "system" and message.get("subtype") == "api_retry":
            attempt, most = message.get("attempt"), message.get("max_retries")
            delay = message.get("retry_delay_ms")
            wait = f" in {float(delay) / 1000:.1f}s" if isinstance(delay, int | float) else ""
            status = message.get("error_status")
            reason = " ".join(str(part) for part in (status, message.get("error")) if part)
            reason = f" ({escape(reason)})" if reason else ""
            self.console.print(f"[dim]↻ API retry {attempt}/{most}{wait}{reason}[/]")

    def finished(self, data: dict[str, Any]) -> None:
        status = str(data.get("status") or "?")
        parts = []
        if isinstance(data.get("duration_ms"), int | float):
            parts.append(f"{data['duration_ms'] / 1000:.1f}s")
        if isinstance(data.get("cost_usd"), int | float):
            parts.append(f"${data['cost_usd']:.4f}")
        if data.get("tokens_used"):
            parts.append(f"{data['tokens_used']} tokens")
        detail = f" ({', '.join(parts)})" if parts else ""
        style = "green" if status in ("success", "completed") else "red"
        self.note(f"[{style}]run finished: {escape(status)}[/]{detail}")
        if data.get("error"):
            code = f"{data['error_code']}: " if data.get("error_code") else ""
            self.console.print(f"  [red]{escape(code + str(data['error']))}[/]")


async def follow(
    client: "RuntimeClient",
    task_id: str,
    view: TaskView,
    *,
    poll_sec: float = POLL_SEC,
    settle_sec: float = SETTLE_SEC,
) -> TaskInfo:
    """Show the task's progress and live output until it has ended; the ended task."""
    task = await client.get_task(task_id)
    view.status(task)
    spinner = view.console.status("", spinner="dots") if view.console.is_terminal else None
    with spinner or contextlib.nullcontext():
        view.spinner = spinner
        events = asyncio.create_task(_render_events(client, task_id, view))
        poller = asyncio.create_task(_poll(client, task_id, view, poll_sec))
        try:
            await asyncio.wait({events, poller}, return_when=asyncio.FIRST_COMPLETED)
            if events.done() and events.result():  # the stream said the task has ended
                poller.cancel()
            elif events.done():  # this runtime has no events stream: polling it is
                await poller
            else:  # ended: let the stream deliver the rest (and its `end`)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(events), settle_sec)
        finally:
            for job in (events, poller):
                job.cancel()
            await asyncio.gather(events, poller, return_exceptions=True)
            view.spinner = None
    task = await client.get_task(task_id)
    view.status(task)
    return task


async def _render_events(client: "RuntimeClient", task_id: str, view: TaskView) -> bool:
    """Render the task's events until its `end`: True; False when the runtime has no events
    stream (404/405 on it, for a task known to exist) or refuses this caller one more (429).
    Reconnects after a broken stream."""
    from bloom.clients.runtime import RuntimeApiError, RuntimeUnreachable

    after, failures = 0, 0
    while True:
        try:
            async for event in client.events(task_id, after=after):
                after = max(after, event.seq)
                failures = 0
                if event.type == "end":
                    return True
                view.event(event)
        except RuntimeApiError as exc:
            if exc.status in (404, 405, 429):
                return False
            raise
        except RuntimeUnreachable:
            failures += 1
            if failures > STREAM_RETRIES:
                raise
        await asyncio.sleep(min(0.25 * 2**failures, 5.0))


async def _poll(client: "RuntimeClient", task_id: str, view: TaskView, every: float) -> None:
    """Report status changes until the task has ended (unreachable now and then is fine)."""
    from bloom.clients.runtime import RuntimeUnreachable

    failures = 0
    while True:
        await asyncio.sleep(every)
        try:
            task = await client.get_task(task_id)
        except RuntimeUnreachable:
            failures += 1
            if failures > STREAM_RETRIES:
                raise
            continue
        failures = 0
        view.status(task)
        if task.status in TERMINAL:
            return


async def follow_to_answer(
    client: "RuntimeClient", task_id: str, view: TaskView
) -> tuple[TaskInfo, str | None]:
    """`follow` the task until it has ended; the ended task, and its answer if it completed."""
    final = await follow(client, task_id, view)
    content = await answer(client, task_id) if final.status == TaskStatus.COMPLETED else None
    return final, content


async def answer(client: "RuntimeClient", task_id: str) -> str | None:
    """The content of the task's newest answer artifact, or None."""
    artifacts = answers(await client.artifacts(task_id))
    if not artifacts:
        return None
    return await client.artifact_content(artifacts[0].id)
