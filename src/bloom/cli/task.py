"""`bloom task …`: queue a task and follow it to its answer; list, show, watch, cancel, requeue."""

import sys
import time
import uuid
from enum import StrEnum
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape
from rich.table import Table

from bloom.cli.output import fail
from bloom.cli.remote import (
    DEFAULT_URL,
    JsonOption,
    UrlOption,
    ago,
    call,
    err,
    out,
    styled_status,
    when,
)
from bloom.cli.watch import TaskView, answer, follow
from bloom.clients.runtime import TERMINAL, RuntimeClient

app = typer.Typer(help="Queue LLM tasks and follow them.", no_args_is_help=True)

STATUSES = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
INTERRUPTED = 130


class Format(StrEnum):
    text = "text"
    json = "json"


def _json(value: Any) -> None:
    typer.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def new_context_id() -> str:
    return f"ctx-{uuid.uuid4().hex[:12]}"


def task_body(
    prompt: str,
    *,
    context: str | None = None,
    agent: str = "default",
    fmt: str = "text",
    timeout: int | None = None,
    budget: float | None = None,
    priority: int | None = None,
    hints: list[str] | None = None,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
) -> dict[str, Any]:
    """The `POST /llm-tasks` body for these options (unset ones left to the runtime)."""
    body: dict[str, Any] = {
        "context_id": context or new_context_id(),
        "agent_slug": agent,
        "prompt": prompt,
        "desired_format": fmt,
    }
    policy: dict[str, Any] = {}
    if timeout is not None:
        policy["timeout_sec"] = timeout
    if budget is not None:
        policy["budget"] = float(budget)
    if policy:
        body["policy"] = policy
    if hints:
        body["context_hints"] = list(hints)
    if priority is not None:
        body["priority"] = priority
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    if max_attempts is not None:
        body["max_attempts"] = max_attempts
    return body


@app.command()
def submit(
    prompt: Annotated[str, typer.Argument(help='The prompt; "-" reads it from stdin.')],
    context: Annotated[
        str | None,
        typer.Option(
            help="Context id: tasks of one context share a worker and its session "
            "(default: a new one)."
        ),
    ] = None,
    agent: Annotated[str, typer.Option(help="Agent slug.")] = "default",
    fmt: Annotated[Format, typer.Option("--format", help="Answer format.")] = Format.text,
    timeout: Annotated[
        int | None, typer.Option(min=1, max=3600, help="Seconds one attempt may run (120).")
    ] = None,
    budget: Annotated[
        float | None, typer.Option(min=0, help="Cost limit in USD, 0 for none (0).")
    ] = None,
    priority: Annotated[
        int | None, typer.Option(min=-1000, max=1000, help="Higher runs first (0).")
    ] = None,
    hint: Annotated[
        list[str] | None,
        typer.Option("--hint", help="A file (path or glob) the task should see; repeatable."),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Same key, same task: a repeat returns the first one.")
    ] = None,
    max_attempts: Annotated[
        int | None, typer.Option(min=1, max=10, help="Attempts before it is dead (3).")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow it (progress and live output on stderr) and print its answer. "
            "Exit status 1 unless it completed.",
        ),
    ] = False,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Queue a task; print its id (with --wait: follow it and print its answer)."""
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        fail("the prompt is empty", 2)
    body = task_body(
        prompt,
        context=context,
        agent=agent,
        fmt=fmt.value,
        timeout=timeout,
        budget=budget,
        priority=priority,
        hints=hint,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
    )
    if not wait:
        task = call(url, lambda client: client.create_task(body))
        if json_output:
            _json(task)
        else:
            typer.echo(task["id"])
        return
    created: dict[str, Any] = {}

    async def submit_and_follow(client: RuntimeClient) -> tuple[dict[str, Any], str | None]:
        task = await client.create_task(body)
        created.update(task)
        view = TaskView(err())
        view.console.print(
            f"[dim]task {task['id']} · context {escape(task['context_id'])} · "
            f"agent {escape(task['agent_slug'])}[/]"
        )
        return await _follow_to_answer(client, task["id"], view)

    try:
        final, content = call(url, submit_and_follow)
    except KeyboardInterrupt:
        _interrupted(created.get("id"))
    _finish(final, content, json_output)


async def _follow_to_answer(
    client: RuntimeClient, task_id: str, view: TaskView
) -> tuple[dict[str, Any], str | None]:
    final = await follow(client, task_id, view)
    content = await answer(client, task_id) if final.get("status") == "completed" else None
    return final, content


def _interrupted(task_id: str | None) -> None:
    console = err()
    if task_id:
        console.print(
            f"\nstopped waiting; task {task_id} keeps going. Follow it again with: "
            f"[bold]bloom task watch {task_id}[/]"
        )
    else:
        console.print("\ninterrupted")
    raise typer.Exit(INTERRUPTED)


def _finish(task: dict[str, Any], content: str | None, as_json: bool) -> None:
    """Print the answer (stdout) or why there is none (stderr); exit 1 unless completed."""
    status = task.get("status")
    if as_json:
        _json(task | {"output": content})
    elif content is not None:
        sys.stdout.write(content if content.endswith("\n") else content + "\n")
        sys.stdout.flush()
    elif status == "completed":
        err().print("[dim](the task completed without output)[/]")
    if status == "completed":
        return
    reason = task.get("last_error")
    detail = f": {reason}" if reason else ""
    if status == "cancelled":
        typer.secho(f"bloom: task {task['id']} was cancelled{detail}", err=True, fg="yellow")
        raise typer.Exit(1)
    fail(f"task {task['id']} {status}{detail}")


@app.command("list")
def list_tasks(
    status: Annotated[
        str | None,
        typer.Option(help=f"Only tasks in this state: {', '.join(STATUSES)}."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=5000, help="At most this many.")] = 50,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """The newest tasks first."""
    if status is not None and status not in STATUSES:
        raise typer.BadParameter(f"one of {', '.join(STATUSES)}", param_hint="--status")
    tasks = call(url, lambda client: client.list_tasks(status=status, limit=limit))
    if json_output:
        _json(tasks)
        return
    if not tasks:
        err().print("no tasks" + (f" {status}" if status else ""))
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=36)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("context", no_wrap=True, max_width=24, overflow="ellipsis")
    table.add_column("worker", no_wrap=True, max_width=20, overflow="ellipsis")
    table.add_column("attempts", no_wrap=True)
    table.add_column("created", no_wrap=True, min_width=8)
    table.add_column("prompt", no_wrap=True, overflow="ellipsis", ratio=1)
    now = time.time_ns() // 1_000_000
    for task in tasks:
        table.add_row(
            str(task["id"]),
            styled_status(str(task["status"])),
            escape(str(task["context_id"])),
            escape(str(task.get("worker_id") or "-")),
            f"{task.get('attempts', 0)}/{task.get('max_attempts', '?')}",
            ago(task.get("created_at"), now),
            escape(_preview(str(task.get("prompt", "")))),
        )
    out().print(table)


def _preview(prompt: str, width: int = 50) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= width else line[: width - 1] + "…"


@app.command()
def show(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """A task's fields, its last error, and its answer."""

    async def fetch(client: RuntimeClient) -> tuple[dict[str, Any], list[Any], str | None]:
        task = await client.get_task(task_id)
        artifacts = await client.artifacts(task_id)
        content = await client.artifact_content(str(artifacts[0]["id"])) if artifacts else None
        return task, artifacts, content

    task, artifacts, content = call(url, fetch)
    if json_output:
        _json(task | {"artifacts": artifacts, "output": content})
        return
    console = out()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    policy = task.get("policy") or {}
    rows: list[tuple[str, str]] = [
        ("id", str(task["id"])),
        (
            "status",
            styled_status(str(task["status"]))
            + (
                " [yellow](cancel requested)[/]"
                if task.get("cancel_requested") and task["status"] not in TERMINAL
                else ""
            ),
        ),
        ("context", escape(str(task["context_id"]))),
        ("agent", escape(str(task["agent_slug"]))),
        ("format", str(task.get("desired_format"))),
        ("priority", str(task.get("priority", 0))),
        ("attempts", f"{task.get('attempts', 0)} of {task.get('max_attempts', '?')}"),
        ("policy", f"timeout {policy.get('timeout_sec', '?')}s, budget ${policy.get('budget', 0)}"),
        ("worker", escape(str(task.get("worker_id") or "-"))),
        ("lease", str(task.get("lease_id") or "-")),
        ("session", escape(str(task.get("session_id") or "-"))),
        ("created", f"{when(task.get('created_at'))} ({ago(task.get('created_at'))})"),
        ("updated", f"{when(task.get('updated_at'))} ({ago(task.get('updated_at'))})"),
    ]
    if task.get("not_before"):
        rows.append(("not before", when(task["not_before"])))
    if task.get("context_hints"):
        rows.append(("hints", escape(", ".join(task["context_hints"]))))
    if task.get("idempotency_key"):
        rows.append(("idempotency key", escape(str(task["idempotency_key"]))))
    for name, value in rows:
        grid.add_row(name, value)
    console.print(grid)
    console.print("\n[bold]prompt[/]")
    console.print(str(task.get("prompt", "")), markup=False)
    if task.get("last_error"):
        console.print("\n[bold]last error[/]")
        console.print(f"[red]{escape(str(task['last_error']))}[/]")
    if content is not None:
        console.print(f"\n[bold]answer[/] [dim](artifact {artifacts[0]['id']})[/]")
        console.print(content, markup=False)


@app.command()
def watch(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Follow a task until it ends (progress and live output on stderr), then print its answer.
    Exit status 1 unless it completed."""

    async def watch_it(client: RuntimeClient) -> tuple[dict[str, Any], str | None]:
        task = await client.get_task(task_id)
        created = task.get("created_at")
        view = TaskView(err(), clock=time.time, started=created / 1000 if created else None)
        return await _follow_to_answer(client, task_id, view)

    try:
        final, content = call(url, watch_it)
    except KeyboardInterrupt:
        _interrupted(task_id)
    _finish(final, content, json_output)


@app.command()
def cancel(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Cancel a task: at once when queued; a running one stops at its worker's next heartbeat."""
    task = call(url, lambda client: client.cancel_task(task_id))
    if task.get("status") == "cancelled":
        typer.echo(f"task {task_id} cancelled")
    else:
        typer.echo(
            f"task {task_id}: cancel requested ({task.get('status')}); its worker stops it at "
            "its next heartbeat"
        )


@app.command()
def requeue(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Put a failed or dead task back in the queue, with a fresh attempt budget."""
    task = call(url, lambda client: client.requeue_task(task_id))
    typer.echo(f"task {task_id} {task.get('status')} again")
