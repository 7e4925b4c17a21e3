"""`bloom up`: everything needed locally, in one command."""

import os
from pathlib import Path

import typer

from bloom.cli.runtime import serve


def up(
    port: int = typer.Option(5000, help="Runtime port."),
) -> None:
    """Start the local stack on SQLite under BLOOM_DATA_DIR (./.bloom). For now that is the
    runtime alone; Membridge and a worker join it as they are built."""
    os.environ.setdefault("BLOOM_LOG_FORMAT", "console")  # people read this output
    data_dir = Path(os.environ.get("BLOOM_DATA_DIR", ".bloom")).resolve()
    typer.secho(f"BLOOM Runtime on http://127.0.0.1:{port}", bold=True)
    typer.echo(f"  API reference  http://127.0.0.1:{port}/api/docs")
    typer.echo(f"  local state    {data_dir}")
    typer.echo("  stop           Ctrl-C")
    serve(host=None, port=port, workers=1, migrate_db=True)
