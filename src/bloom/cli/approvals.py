"""`bloom approvals`: tool calls waiting for a person (docs/approvals.md): list them, approve or
deny one. A decision puts its task back in the queue; the run resumes where it stopped."""

from typing import Annotated, Any

import typer
from rich.markup import escape

from bloom.cli.output import print_json
from bloom.cli.remote import DEFAULT_URL, JsonOption, UrlOption, call, out

app = typer.Typer(no_args_is_help=True, help="Tool calls waiting for a person's decision.")

ApprovalId = Annotated[str, typer.Argument(metavar="ID", help="The approval's id.")]
Note = Annotated[str | None, typer.Option(help="Why; a denial's note is told to the agent.")]


@app.command("list")
def list_approvals(
    status: Annotated[
        str, typer.Option(help="pending, approved, denied, expired, or all.")
    ] = "pending",
    task: Annotated[str | None, typer.Option(help="Only this task's.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Approvals, newest first (pending ones by default)."""
    wanted = None if status == "all" else status
    found = call(url, lambda client: client.approvals(status=wanted, task_id=task, limit=limit))
    if json_output:
        print_json(found)
        return
    if not found:
        out().print(f"no {'' if wanted is None else wanted + ' '}approvals")
        return
    for approval in found:
        out().print(_line(approval))


@app.command("approve")
def approve(
    approval_id: ApprovalId,
    note: Note = None,
    remember: Annotated[
        bool,
        typer.Option(
            help="Allow this same call (tool and input) in the task's context from now on."
        ),
    ] = False,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Approve the call: its task resumes and runs exactly that call."""
    decided = call(
        url,
        lambda client: client.decide_approval(approval_id, "approve", note=note, remember=remember),
    )
    _said(decided, json_output)


@app.command("deny")
def deny(
    approval_id: ApprovalId,
    note: Annotated[str, typer.Option(help="Why: the agent is told it as the tool's answer.")],
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Deny the call: its task resumes, and the agent is told the denial and the note."""
    decided = call(url, lambda client: client.decide_approval(approval_id, "deny", note=note))
    _said(decided, json_output)


def _said(decided: Any, json_output: bool) -> None:
    if json_output:
        print_json(decided)
        return
    out().print(f"{decided['status']}: {_line(decided)}")


def _line(approval: Any) -> str:
    status = str(approval.get("status"))
    decided = ""
    if approval.get("decided_by"):
        decided = f"  by {approval['decided_by']}"
        if approval.get("note"):
            decided += f": {approval['note']}"
    return (
        f"[bold]{escape(str(approval['id']))}[/]  {escape(status):<8}  "
        f"task {escape(str(approval['task_id']))}  "
        f"{escape(str(approval.get('summary') or approval.get('tool_name')))}"
        f"{escape(decided)}"
    )
