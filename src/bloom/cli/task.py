"""`bloom task …`: queue a task and follow it to its answer; list, show, watch, cancel, requeue."""

import sys
import time
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from bloom.cli import task_change
from bloom.cli.output import fail, print_json
from bloom.cli.remote import DEFAULT_URL, JsonOption, UrlOption, call, err, out, when
from bloom.clients.wire import ArtifactInfo, TaskInfo, answers
from bloom.domain.policy import DEFAULT_TIMEOUT_SEC
from bloom.domain.stall import (
    DEFAULT_STALL_SEC,
    MAX_STALL_SEC,
    MIN_STALL_SEC,
    OnStall,
    stall_sec_problem,
)
from bloom.domain.states import TaskStatus

if TYPE_CHECKING:  # the client (httpx) is imported when a command calls the runtime
    from bloom.clients.runtime import RuntimeClient

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's

STATUSES = tuple(TaskStatus)
INTERRUPTED = 130


class Format(StrEnum):
    text = "text"
    json = "json"


class DependencyFailure(StrEnum):
    cancel = "cancel"
    run = "run"


class Cli(StrEnum):
    claude = "claude"
    codex = "codex"
    gemini = "gemini"


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
    stall_sec: int | None = None,
    on_stall: str | None = None,
    workspace: dict[str, Any] | None = None,
    after: list[str] | None = None,
    on_dependency_failure: str | None = None,
    cli: str | None = None,
    with_artifacts: bool = False,
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
    if stall_sec is not None:
        policy["stall_sec"] = stall_sec
    if on_stall is not None:
        policy["on_stall"] = on_stall
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
    if workspace:
        body["workspace"] = workspace
    if cli is not None:
        body["cli"] = cli
    return body | graph_fields(after, on_dependency_failure, with_artifacts)


def graph_fields(
    after: list[str] | None, on_dependency_failure: str | None, with_artifacts: bool = False
) -> dict[str, Any]:
    """`--after`'s, `--with-artifacts`' and `--on-dependency-failure`'s part of the body
    (docs/graphs.md)."""
    fields: dict[str, Any] = {}
    if after:
        fields["depends_on"] = list(after)
        if with_artifacts:
            fields["dependency_artifacts"] = list(after)
    if on_dependency_failure is not None:
        fields["on_dependency_failure"] = on_dependency_failure
    return fields


def workspace_body(
    repo: str | None, ref: str | None, branch: str | None, push: bool | None
) -> dict[str, Any] | None:
    """`--repo`'s workspace (the options that need it refused without it)."""
    if repo is None:
        if ref or branch or push is not None:
            fail("--ref, --branch and --push/--no-push need --repo", 2)
        return None
    given = {"ref": ref, "branch": branch, "push": push}
    return {"repo": repo} | {name: value for name, value in given.items() if value is not None}


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
        int | None,
        typer.Option(
            min=1,
            max=3600,
            help=f"Seconds one attempt may run ({DEFAULT_TIMEOUT_SEC}).",
        ),
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
    stall_sec: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=MAX_STALL_SEC,
            help=f"Seconds the run may print nothing before it is stalled: 0 (never) or "
            f"{MIN_STALL_SEC}..{MAX_STALL_SEC} (the runtime's BLOOM_STALL_SEC, "
            f"{DEFAULT_STALL_SEC} unless set).",
        ),
    ] = None,
    on_stall: Annotated[
        OnStall | None,
        typer.Option(
            help="When it stalls: flag it (shown, audited) or retry (stop it, run it again) (flag)."
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            help="A managed project the task changes: it runs in a worktree of the project's "
            "branch, and its change comes back as a commit and a patch (docs/workspaces.md)."
        ),
    ] = None,
    ref: Annotated[
        str | None, typer.Option(help="With --repo: the branch, tag or commit to start from.")
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option(help="With --repo: the branch to write (bloom/<context>)."),
    ] = None,
    push: Annotated[
        bool | None,
        typer.Option("--push/--no-push", help="With --repo: push the branch after each run."),
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            "--after",
            help="A task to wait for (its id); repeatable. The task is blocked until they "
            "complete, and gets their answers before its prompt (docs/graphs.md).",
        ),
    ] = None,
    on_dependency_failure: Annotated[
        DependencyFailure | None,
        typer.Option(
            help="With --after: when one of them fails, cancel this task or run it anyway (cancel)."
        ),
    ] = None,
    with_artifacts: Annotated[
        bool,
        typer.Option(
            "--with-artifacts",
            help="With --after: pass on their artifacts too (a workspace task's patch), not "
            "only their answers.",
        ),
    ] = False,
    cli: Annotated[
        Cli | None,
        typer.Option(
            "--cli",
            help="The agent CLI that runs it; only a worker that has it takes it (claude).",
        ),
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
    if on_dependency_failure is not None and not after:
        fail("--on-dependency-failure needs --after", 2)
    if with_artifacts and not after:
        fail("--with-artifacts needs --after", 2)
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        fail("the prompt is empty", 2)
    problem = None if stall_sec is None else stall_sec_problem(stall_sec)
    if problem:
        fail(f"--stall-sec: {problem}", 2)
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
        stall_sec=stall_sec,
        on_stall=on_stall.value if on_stall is not None else None,
        workspace=workspace_body(repo, ref, branch, push),
        after=after,
        on_dependency_failure=on_dependency_failure.value if on_dependency_failure else None,
        cli=cli.value if cli is not None else None,
        with_artifacts=with_artifacts,
    )
    if not wait:
        task = call(url, lambda client: client.create_task(body))
        if json_output:
            print_json(task.raw)
        else:
            typer.echo(task.id)
        return
    from bloom.cli.watch import TaskView, follow_to_answer

    created: list[TaskInfo] = []

    async def submit_and_follow(client: "RuntimeClient") -> tuple[TaskInfo, str | None]:
        task = await client.create_task(body)
        created.append(task)
        view = TaskView(err())
        view.submitted(task)
        return await follow_to_answer(client, task.id, view)

    try:
        final, content = call(url, submit_and_follow)
    except KeyboardInterrupt:
        _interrupted(created[0].id if created else None)
    _finish(final, content, json_output)
    if repo is not None and not json_output:
        patch = task_change.patch_of(url, final.id, required=False)
        if patch is None:
            err().print("[dim](no change to the repository)[/]")
        else:
            task_change.print_patch(patch)


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


def _finish(task: TaskInfo, content: str | None, as_json: bool) -> None:
    """Print the answer (stdout) or why there is none (stderr); exit 1 unless completed."""
    status = task.status
    if as_json:
        print_json({**task.raw, "output": content})
    elif content is not None:
        sys.stdout.write(content if content.endswith("\n") else content + "\n")
        sys.stdout.flush()
    elif status == TaskStatus.COMPLETED:
        err().print("[dim](the task completed without output)[/]")
    if status == TaskStatus.COMPLETED:
        return
    detail = f": {task.last_error}" if task.last_error else ""
    if status == TaskStatus.CANCELLED:
        typer.secho(f"bloom: task {task.id} was cancelled{detail}", err=True, fg="yellow")
        raise typer.Exit(1)
    fail(f"task {task.id} {status}{detail}")


@app.command("list")
def list_tasks(
    status: Annotated[
        str | None,
        typer.Option(help=f"Only tasks in this state: {', '.join(STATUSES)}."),
    ] = None,
    cli: Annotated[Cli | None, typer.Option("--cli", help="Only tasks of this agent CLI.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=5000, help="At most this many.")] = 50,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """The newest tasks first."""
    if status is not None and status not in STATUSES:
        raise typer.BadParameter(f"one of {', '.join(STATUSES)}", param_hint="--status")
    tasks = call(url, lambda client: client.list_tasks(status=status, limit=limit, cli=cli))
    if json_output:
        print_json([task.raw for task in tasks])
        return
    if not tasks:
        err().print("no tasks" + (f" {status}" if status else ""))
        return
    from bloom.cli.task_views import task_table

    out().print(task_table(tasks))


@app.command()
def show(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    tools: Annotated[
        bool, typer.Option("--tools", help="Its tool calls, each with how it was decided.")
    ] = False,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """A task's fields, its last error, and its answer (with --tools: its tool calls)."""
    if tools:
        show_tool_calls(task_id, json_output, url)
        return

    async def fetch(client: "RuntimeClient") -> tuple[TaskInfo, list[ArtifactInfo], str | None]:
        task = await client.get_task(task_id)
        artifacts = await client.artifacts(task_id)
        found = answers(artifacts)
        content = await client.artifact_content(found[0].id) if found else None
        return task, artifacts, content

    task, artifacts, content = call(url, fetch)
    if json_output:
        raw_artifacts = [artifact.raw for artifact in artifacts]
        print_json({**task.raw, "artifacts": raw_artifacts, "output": content})
        return
    from bloom.cli.task_views import print_task

    print_task(out(), task, artifacts, content)


def show_tool_calls(task_id: str, json_output: bool, url: str) -> None:
    """Each tool call of the task's attempts, oldest first, as its audit entries keep them."""
    entries = call(url, lambda client: client.audit(task_id=task_id, limit=1000))
    calls = [entry for entry in reversed(entries) if entry.get("action") == "tool_call"]
    if json_output:
        print_json(calls)
        return
    if not calls:
        out().print("no tool calls recorded")
        return
    for entry in calls:
        out().print(f"{when(int(entry['timestamp']))}  {escape(str(entry.get('detail')))}")


@app.command()
def watch(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Follow a task until it ends (progress and live output on stderr), then print its answer.
    Exit status 1 unless it completed."""

    from bloom.cli.watch import TaskView, follow_to_answer

    async def watch_it(client: "RuntimeClient") -> tuple[TaskInfo, str | None]:
        task = await client.get_task(task_id)
        view = TaskView(err(), clock=time.time, started=task.created_at / 1000)
        return await follow_to_answer(client, task_id, view)

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
    if task.status == TaskStatus.CANCELLED:
        typer.echo(f"task {task_id} cancelled")
    else:
        typer.echo(
            f"task {task_id}: cancel requested ({task.status}); its worker stops it at "
            "its next heartbeat"
        )


@app.command()
def requeue(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="The task's id.")],
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Put a failed or dead task back in the queue, with a fresh attempt budget."""
    task = call(url, lambda client: client.requeue_task(task_id))
    typer.echo(f"task {task_id} {task.status} again")


app.command("diff")(task_change.diff)
app.command("apply")(task_change.apply)
