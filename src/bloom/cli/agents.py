"""`bloom agents …`: the agent CLIs this machine has (where, which version, logged in or not),
and fetching the pinned version of one into the project's cache."""

import dataclasses
import os
from typing import Annotated, Any

import typer

from bloom.cli.output import fail, print_json, say

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


def _known() -> list[str]:
    from bloom.worker.agents.registry import ADAPTERS

    return list(ADAPTERS)


def survey() -> list[dict[str, Any]]:
    """Each known CLI as this machine has it, found as the worker finds it; its credentials
    looked for as the worker gives it its environment (no model is called)."""
    from bloom.cli.worker import worker_settings
    from bloom.worker.agents import registry

    configured = registry.adapters(worker_settings())
    rows = []
    for name, kind in registry.ADAPTERS.items():
        found = kind.find(os.environ)
        row: dict[str, Any] = {
            "name": name,
            "title": kind.title,
            "package": kind.package,
            "pinned_version": kind.pinned_version,
            "found": found is not None,
            "path": str(found.path) if found else None,
            "source": found.source if found else None,
            "version": found.version if found else None,
            "logged_in": None,
            "credentials_problem": None,
        }
        if found is not None:
            adapter = dataclasses.replace(configured[name], binary=str(found.path))
            problem = adapter.credentials_problem(adapter.environment(os.environ, "default"))
            row |= {"logged_in": problem is None, "credentials_problem": problem}
        rows.append(row)
    return rows


@app.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Each agent CLI the worker knows: where it was found (BLOOM_<CLI>_BIN, PATH, or the
    cache), its version beside the pinned one, whether it has credentials (no model is
    called)."""
    rows = survey()
    if as_json:
        print_json(rows)
        return
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        if not row["found"]:
            line = (
                f"not found (`bloom agents install {row['name']}` fetches {row['pinned_version']})"
            )
        else:
            version = row["version"] or "unknown version"
            pinned = (
                "" if version == row["pinned_version"] else f" (pinned: {row['pinned_version']})"
            )
            login = "logged in" if row["logged_in"] else "not logged in"
            line = f"{version}{pinned}  {row['source']}: {row['path']}  {login}"
        typer.echo(f"{row['name']:<{width}}  {line}")
        if row["found"] and not row["logged_in"] and row["credentials_problem"]:
            say(f"  {row['credentials_problem']}")


@app.command()
def install(
    name: Annotated[str, typer.Argument(help="The CLI: claude, codex or gemini.")],
    force: Annotated[
        bool, typer.Option("--force", help="Run npm even when it is already cached.")
    ] = False,
) -> None:
    """Fetch the pinned version of an agent CLI into the project's cache (./.cache/<name>-cli)
    with npm; print the binary's path."""
    from bloom.worker.agents.registry import ADAPTERS

    kind = ADAPTERS.get(name)
    if kind is None:
        fail(f"no agent CLI named {name!r}: one of {', '.join(ADAPTERS)}", 2)
    if not force:
        found = kind.find(os.environ)
        if found is not None and found.source == "cache" and found.version == kind.pinned_version:
            say(f"{kind.title} CLI {kind.pinned_version} already in the cache")
            typer.echo(str(found.path))
            return
    try:
        binary = kind.install(os.environ, say)
    except RuntimeError as exc:
        fail(str(exc))
    typer.echo(str(binary))
