"""`bloom artifact get`: an artifact's content, streamed from the runtime (a progress bar for
large ones); `bloom artifacts migrate --to s3`: move stored content into another store."""

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TransferSpeedColumn,
)

from bloom.cli.admin import on_runtime
from bloom.cli.output import fail
from bloom.cli.remote import DEFAULT_URL, UrlOption, call, err
from bloom.domain.models import Artifact

if TYPE_CHECKING:  # the client (httpx) is imported when a command calls the runtime
    from bloom.clients.runtime import RuntimeClient

app = typer.Typer()  # its help: bloom.cli.main's
PROGRESS_FROM_BYTES = 1024 * 1024
"""Smaller downloads finish before a bar would be worth drawing."""


@app.command("get")
def get(
    artifact_id: Annotated[str, typer.Argument(help="The artifact's id (see `bloom task show`).")],
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write to this file instead of stdout."),
    ] = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Print an artifact's content, or write it to a file."""
    if output is None:
        call(url, lambda client: _download(client, artifact_id, sys.stdout.buffer, progress=False))
        sys.stdout.buffer.flush()
        return
    output = output.resolve()
    if output.is_dir():
        fail(f"{output} is a directory: name the file to write")
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
    try:
        with os.fdopen(fd, "wb") as sink:
            call(url, lambda client: _download(client, artifact_id, sink, progress=True))
        os.replace(tmp, output)  # a file appears whole, or not at all
    finally:
        Path(tmp).unlink(missing_ok=True)


async def _download(
    client: "RuntimeClient", artifact_id: str, sink: BinaryIO, progress: bool
) -> None:
    async with client.artifact_download(artifact_id) as download:
        show = progress and err().is_terminal and (download.size or 0) >= PROGRESS_FROM_BYTES
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err(),
            disable=not show,
        ) as bar:
            task = bar.add_task(artifact_id[:12], total=download.size)
            async for chunk in download.chunks:
                sink.write(chunk)
                bar.advance(task, len(chunk))


@app.command("migrate")
def migrate(
    to: Annotated[str, typer.Option("--to", help="The store to move content into: s3 or fs.")],
) -> None:
    """Move every artifact's content into another store (resumable: run it again after a stop).

    Works on the runtime's database directly (its settings: DATABASE_URL, MINIO_*), while the
    runtime serves. Each artifact's content is checked against its recorded SHA-256 on the way;
    its row is pointed at the new store only once the copy is complete."""
    console = err()

    def said(artifact: Artifact, outcome: str) -> None:
        if outcome != "moved":
            console.print(f"[red]{outcome}[/]: artifact {artifact.id} ({artifact.storage})")

    report = on_runtime(lambda container: container.artifact_moves.move_all(to, said))
    console.print(
        f"moved {report.moved} artifacts ({report.moved_bytes:,} bytes) into {to}; "
        f"{report.missing} missing, {report.mismatched} not matching their SHA-256"
    )
    if report.problems:
        fail(f"{report.problems} artifacts could not be moved (listed above)")
