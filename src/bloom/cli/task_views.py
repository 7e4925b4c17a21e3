"""How `bloom task list` and `bloom task show` lay tasks out for people, with rich.

Imported once the runtime has answered: an unreachable runtime, an error or `--json` never pays
for rich's tables (docs/decisions.md)."""

import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bloom.cli.remote import ago, styled_status, when
from bloom.clients.wire import ArtifactInfo, HoldInfo, Policy, StallInfo, TaskInfo, answers
from bloom.domain.stall import silence
from bloom.domain.states import TERMINAL


def task_table(tasks: list[TaskInfo]) -> Table:
    """One row a task, in the order given; the prompt cut to what fits."""
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
            task.id,
            styled_status(task.status) + (" [yellow]held[/]" if task.hold else ""),
            escape(task.context_id),
            escape(task.worker_id or "-"),
            f"{task.attempts}/{task.max_attempts}",
            ago(task.created_at, now),
            escape(_preview(task.prompt)),
        )
    return table


def _waits(task: TaskInfo) -> list[str]:
    """What the task waits for, if anything: a budget, a person, a worker with its CLI, a
    branch another task writes."""
    said = [_hold_text(task.hold)] if task.hold is not None else []
    if task.status == "awaiting_approval":
        said.append(f"for a person: bloom approvals list --task {task.id}")
    waiting = task.raw.get("waiting_for")
    if isinstance(waiting, dict) and waiting.get("reason") == "no_worker_with_cli":
        cli = waiting.get("cli")
        said.append(escape(f"no online worker has the {cli} CLI (with credentials for it)"))
    elif isinstance(waiting, dict):
        writer, branch = waiting.get("task_id"), waiting.get("branch")
        said.append(escape(f"task {writer} is writing branch {branch}"))
    return said


def print_task(
    console: Console, task: TaskInfo, artifacts: list[ArtifactInfo], content: str | None
) -> None:
    """A task's fields, its prompt, its last error, and its answer (the newest artifact's
    `content`)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    policy = task.policy
    cancelling = task.cancel_requested and task.status not in TERMINAL
    rows: list[tuple[str, str]] = [
        ("id", task.id),
        (
            "status",
            styled_status(task.status) + (" [yellow](cancel requested)[/]" if cancelling else ""),
        ),
        ("context", escape(task.context_id)),
        ("agent", escape(task.agent_slug)),
        ("cli", escape(task.cli)),
        ("format", task.desired_format),
        ("priority", str(task.priority)),
        ("attempts", f"{task.attempts} of {task.max_attempts}"),
        ("policy", _policy_text(policy)),
        ("worker", escape(task.worker_id or "-")),
        ("lease", task.lease_id or "-"),
        ("session", escape(task.session_id or "-")),
        ("created", f"{when(task.created_at)} ({ago(task.created_at)})"),
        ("updated", f"{when(task.updated_at)} ({ago(task.updated_at)})"),
    ]
    if task.workspace is not None:
        spec = task.workspace
        rows.append(("workspace", escape(f"{spec.repo} · {spec.branch}")))
    rows += [("waits", reason) for reason in _waits(task)]
    if task.stall is not None:
        rows.append(("stalled", _stall_text(task.stall)))
    if task.not_before:
        rows.append(("not before", when(task.not_before)))
    if task.context_hints:
        rows.append(("hints", escape(", ".join(task.context_hints))))
    if task.idempotency_key:
        rows.append(("idempotency key", escape(task.idempotency_key)))
    for name, value in rows:
        grid.add_row(name, value)
    console.print(grid)
    console.print("\n[bold]prompt[/]")
    console.print(task.prompt, markup=False)
    if task.last_error:
        console.print("\n[bold]last error[/]")
        console.print(f"[red]{escape(task.last_error)}[/]")
    if content is not None:
        console.print(f"\n[bold]answer[/] [dim](artifact {answers(artifacts)[0].id})[/]")
        console.print(content, markup=False)


def _amount(usd: float) -> str:
    """`0`, `0.5`, `12`: dollars as people write them."""
    return f"{usd:g}"


def _policy_text(policy: Policy) -> str:
    """`timeout 120s, budget $0`, and what it says of stalls when it says anything."""
    text = f"timeout {policy.timeout_sec}s, budget ${_amount(policy.budget)}"
    if policy.stall_sec is not None:
        text += ", stall " + (f"{policy.stall_sec}s" if policy.stall_sec else "off")
    if policy.on_stall is not None:
        text += f", on stall {escape(policy.on_stall)}"
    return text


def _stall_text(stall: StallInfo) -> str:
    now = time.time_ns() // 1_000_000
    return (
        f"[yellow]no output for {silence(now - stall.silent_since)} on worker "
        f"{escape(stall.worker_id)} (found {ago(stall.stalled_at, now)}; heartbeats go on)[/]"
    )


def _hold_text(hold: HoldInfo) -> str:
    return (
        f"[yellow]project {escape(hold.project)} has spent its budget ({hold.reason}): until "
        f"{when(hold.until)} ({ago(hold.until)}); `bloom budget list`[/]"
    )


def _preview(prompt: str, width: int = 50) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= width else line[: width - 1] + "…"
