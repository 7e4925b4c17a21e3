"""`bloom policy`: a project's default tool policy (docs/approvals.md), merged into each of its
tasks' `policy.tools` when the task is created."""

from typing import Annotated, Any

import typer
from rich.markup import escape

from bloom.cli.output import print_json
from bloom.cli.remote import DEFAULT_URL, JsonOption, UrlOption, call, out

app = typer.Typer(no_args_is_help=True, help="Tool policies per project: what its agents may do.")

Project = Annotated[str, typer.Argument(metavar="PROJECT", help="A task's agent_slug.")]
Rules = Annotated[
    list[str] | None,
    typer.Option(metavar="RULE", help="A rule such as Bash, 'Bash(git push:*)', Edit(src/**)."),
]


@app.command("set")
def set_policy(
    project: Project,
    allow: Rules = None,
    deny: Rules = None,
    ask: Annotated[
        list[str] | None,
        typer.Option(metavar="RULE", help="Wait for a person's decision (bloom approvals)."),
    ] = None,
    mode: Annotated[
        str | None, typer.Option(help="default, acceptEdits, plan or bypassPermissions.")
    ] = None,
    max_turns: Annotated[int | None, typer.Option(min=1, help="The CLI's turn limit.")] = None,
    allow_bypass: Annotated[
        bool, typer.Option(help="Let the project's tasks run in bypassPermissions mode.")
    ] = False,
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Set (replace) a project's default tool policy (admin; audited).

    Each task of the project created from now on runs with it merged in: the project's deny
    always wins over a task's allow; a task's mode and turn limit win over the project's."""
    body: dict[str, Any] = {
        "allow": allow or [],
        "deny": deny or [],
        "ask": ask or [],
        "allow_bypass": allow_bypass,
    }
    if mode is not None:
        body["mode"] = mode
    if max_turns is not None:
        body["max_turns"] = max_turns
    view = call(url, lambda client: client.set_tool_policy(project, body))
    if json_output:
        print_json(view)
        return
    out().print(_shown(view))


@app.command("show")
def show(project: Project, json_output: JsonOption = False, url: UrlOption = DEFAULT_URL) -> None:
    """A project's default tool policy."""
    view = call(url, lambda client: client.tool_policy(project))
    if json_output:
        print_json(view)
        return
    out().print(_shown(view))


@app.command("remove")
def remove(project: Project, url: UrlOption = DEFAULT_URL) -> None:
    """Remove a project's default tool policy (admin; audited). Tasks created before keep the
    policy they were created with."""
    call(url, lambda client: client.remove_tool_policy(project))
    out().print(f"tool policy of {escape(project)} removed")


def _shown(view: Any) -> str:
    lines = [f"[bold]{escape(str(view['project']))}[/]"]
    for name in ("allow", "deny", "ask"):
        rules = view.get(name) or []
        lines.append(f"  {name}: " + (escape(", ".join(rules)) if rules else "-"))
    lines.append(f"  mode: {escape(str(view.get('mode') or '-'))}")
    lines.append(f"  max turns: {view.get('max_turns') or '-'}")
    lines.append(f"  bypass allowed: {'yes' if view.get('allow_bypass') else 'no'}")
    lines.append(f"  set by {escape(str(view.get('updated_by')))}")
    return "\n".join(lines)
