"""`bloom memory push|pull|status|doctor|leadership`: a project's Claude memory synced through
the object store (docs/memory-sync.md). Settings by the reference tool's names and its
`config.env`; exit codes as its: 0 ok or up to date, 1 error, 2 primary refused pull, 3
secondary blocked push."""

import asyncio
import json
from typing import Annotated

import typer

from bloom.cli.output import fail, say
from bloom.domain.memory import ExitCode, Report

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's

ProjectOption = Annotated[
    str | None, typer.Option("--project", "-p", help="The project (overrides CLAUDE_PROJECT_ID).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]


def _run(action: str, project: str | None, as_json: bool) -> None:
    from bloom.memory.actions import Action, perform  # the object store's client: when it runs
    from bloom.memory.settings import load_memory_settings
    from bloom.web.settings import SettingsError

    try:
        settings = load_memory_settings(project)
        report = asyncio.run(perform(Action(action), settings))
    except SettingsError as exc:
        fail(str(exc), ExitCode.ERROR)
    _show(report, as_json)
    raise typer.Exit(report.code)


def _show(report: Report, as_json: bool) -> None:
    if as_json:
        doc = {"ok": report.ok, "code": int(report.code), "detail": report.detail}
        typer.echo(json.dumps(doc | report.facts, indent=2))
        return
    if report.ok:
        say(report.detail)
    else:
        typer.secho(f"bloom: {report.detail}", err=True, fg=typer.colors.RED)
    for name, value in report.facts.items():
        if isinstance(value, list) and len(value) == 2:  # a doctor's check: verdict, detail
            say(f"  {name}: {value[0]}: {value[1]}")
        else:
            say(f"  {name}: {json.dumps(value) if isinstance(value, dict | list) else value}")


@app.command("push")
def push_command(project: ProjectOption = None, as_json: JsonOption = False) -> None:
    """Publish the local database as the project's snapshot (primary only)."""
    _run("push", project, as_json)


@app.command("pull")
def pull_command(project: ProjectOption = None, as_json: JsonOption = False) -> None:
    """Replace the local database by the published snapshot (backed up first)."""
    _run("pull", project, as_json)


@app.command("status")
def status_command(project: ProjectOption = None, as_json: JsonOption = False) -> None:
    """Role, local and published digests and counts (changes nothing)."""
    _run("status", project, as_json)


@app.command("doctor")
def doctor_command(project: ProjectOption = None, as_json: JsonOption = False) -> None:
    """Check the bucket, its conditional writes, the lease, the lock, the database, the hooks."""
    _run("doctor", project, as_json)


@app.command("leadership")
def leadership_command(project: ProjectOption = None, as_json: JsonOption = False) -> None:
    """This node's role, settling the lease (bootstrap, renewal or takeover) if needed."""
    _run("leadership", project, as_json)
