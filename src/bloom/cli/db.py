"""`bloom db …`: schema migrations."""

import typer

from bloom.settings import RuntimeSettings
from bloom.storage import migrate
from bloom.storage.database import DatabaseUrlError, resolve_database

app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Migrate the runtime's database (DATABASE_URL, or SQLite under BLOOM_DATA_DIR)."""
    settings = RuntimeSettings()
    try:
        target = resolve_database(settings.database_url, settings.data_dir)
    except DatabaseUrlError as exc:
        raise typer.BadParameter(str(exc), param_hint="DATABASE_URL") from None
    typer.echo(f"Migrating {target.display} to {revision} …")
    migrate.upgrade(target, revision)
    typer.echo(f"At revision {migrate.current_revision(target)}.")


@app.command()
def current() -> None:
    """Show the database's schema revision and the newest one this version knows."""
    settings = RuntimeSettings()
    target = resolve_database(settings.database_url, settings.data_dir)
    typer.echo(f"database: {migrate.current_revision(target) or 'empty'}")
    typer.echo(f"head:     {migrate.head_revision()}")
