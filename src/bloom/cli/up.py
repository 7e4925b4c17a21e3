"""`bloom up`: everything needed locally, in one command."""

import typer

from bloom.cli.runtime import serve


def up(
    port: int = typer.Option(5000, help="Runtime port."),
) -> None:
    """Start the local stack on SQLite under BLOOM_DATA_DIR (./.bloom). For now that is the
    runtime alone; Membridge and a worker join it as they are built."""
    serve(host=None, port=port, workers=1, migrate_db=True)
