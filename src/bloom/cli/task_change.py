"""`bloom task diff` and `bloom task apply`: a workspace task's change, read or applied to the
checkout you are in (docs/workspaces.md)."""

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bloom.cli.output import fail, say
from bloom.cli.remote import DEFAULT_URL, UrlOption, call
from bloom.domain.workspace import PATCH_ARTIFACT

if TYPE_CHECKING:
    from bloom.clients.runtime import RuntimeClient

TaskId = Annotated[str, typer.Argument(metavar="ID", help="The task's id.")]
COLORS = (
    ("diff --git", "bright_white"),
    ("+++", "bright_white"),
    ("---", "bright_white"),
    ("@@", "cyan"),
    ("+", "green"),
    ("-", "red"),
)
GIT_TIMEOUT_SEC = 120


def patch_of(url: str, task_id: str, *, required: bool = True) -> str | None:
    """The task's patch; exits 1 with why when it has none (unless not `required`)."""

    async def fetch(client: "RuntimeClient") -> str | None:
        task = await client.get_task(task_id)
        if task.workspace is None:
            fail(f"task {task_id} has no workspace: it changed no repository")
        patches = [a for a in await client.artifacts(task_id) if a.type == PATCH_ARTIFACT]
        return await client.artifact_content(patches[0].id) if patches else None

    patch = call(url, fetch)
    if patch is None and required:
        fail(f"task {task_id} has no change (yet): no patch was kept")
    return patch


def diff(task_id: TaskId, url: UrlOption = DEFAULT_URL) -> None:
    """A workspace task's change as a patch (colored on a terminal)."""
    print_patch(patch_of(url, task_id) or "")


def print_patch(patch: str) -> None:
    """On stdout; colored when it is a terminal."""
    if not sys.stdout.isatty():
        sys.stdout.write(patch)
        return
    for line in patch.splitlines():
        color = next((c for prefix, c in COLORS if line.startswith(prefix)), None)
        typer.secho(line, fg=color)


def apply(
    task_id: TaskId,
    commit: Annotated[
        bool,
        typer.Option(
            "--commit/--no-commit",
            help="Apply it as the task's commits (git am), or only to the files and the index.",
        ),
    ] = True,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Apply a workspace task's change to the git checkout you are in: all of it, or, on a
    conflict, nothing (exit 1, the conflicting files named)."""
    patch = patch_of(url, task_id) or ""
    root = _git(["rev-parse", "--show-toplevel"], None)
    if root.returncode != 0:
        fail("not in a git checkout: cd into the repository the task changed", 2)
    where = Path(root.stdout.strip())
    if commit:
        applied = _git(["am", "--keep-cr", "--3way"], patch, where)
        if applied.returncode != 0:
            _git(["am", "--abort"], None, where)
    else:  # git apply changes every file or none
        applied = _git(["apply", "--index"], patch, where)
    if applied.returncode != 0:
        detail = (applied.stderr or applied.stdout).strip().splitlines()
        fail(
            f"the change of task {task_id} does not apply here; nothing was changed: "
            + ("; ".join(detail[-6:]) or f"git exited {applied.returncode}")
        )
    say(f"applied the change of task {task_id} to {where}")


def _git(
    args: list[str], stdin: str | None, cwd: Path | None = None
) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(  # noqa: S603
            ["git", *args],  # noqa: S607
            input=stdin,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SEC,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"git could not be run: {exc}", 2)
