"""`bloom db …`: schema migrations."""

import typer

from bloom.cli.common import runtime_settings

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Migrate the runtime's database (DATABASE_URL, or SQLite under BLOOM_DATA_DIR)."""
    from bloom.runtime.storage.schema import SCHEMA

    _, target = runtime_settings()
    typer.echo(f"Migrating {target.display} to {revision} …")
    SCHEMA.upgrade(target, revision)
    typer.echo(f"At revision {SCHEMA.current_revision(target)}.")


@app.command()
def current() -> None:
    """Show the database's schema revision and the newest one this version knows."""
    from bloom.runtime.storage.schema import SCHEMA

    _, target = runtime_settings()
    typer.echo(f"database: {SCHEMA.current_revision(target) or 'empty'}")
    typer.echo(f"head:     {SCHEMA.head_revision()}")
