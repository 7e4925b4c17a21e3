"""`bloom membridge …`: the Membridge control plane server and its schema."""

from typing import TYPE_CHECKING, Annotated

import typer

from bloom.cli.common import uvicorn_options
from bloom.cli.output import fail

if TYPE_CHECKING:  # the server's modules are imported by the commands, not by `--help`
    from bloom.db.database import DatabaseTarget
    from bloom.membridge.settings import MembridgeSettings

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's
db_app = typer.Typer(help="Membridge's database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


def _settings(**overrides: object) -> "tuple[MembridgeSettings, DatabaseTarget]":
    """Membridge's settings and database, or a one-line error and exit status 2."""
    from bloom.db.database import DatabaseUrlError
    from bloom.membridge.container import database_target
    from bloom.membridge.settings import load_membridge_settings
    from bloom.web.settings import SettingsError

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = load_membridge_settings(**given)
        return settings, database_target(settings)
    except SettingsError as exc:
        fail(str(exc), 2)
    except DatabaseUrlError as exc:
        fail(f"BLOOM_MEMBRIDGE_DATABASE_URL: {exc}", 2)


def _upgrade(target: "DatabaseTarget", revision: str = "head") -> None:
    from sqlalchemy.exc import SQLAlchemyError

    from bloom.membridge.storage.schema import SCHEMA

    try:
        SCHEMA.upgrade(target, revision)
    except SQLAlchemyError as exc:
        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__]
        fail(f"cannot migrate {target.display}: {lines[0]}")


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to bind [env BLOOM_MEMBRIDGE_HOST]")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="Port [env BLOOM_MEMBRIDGE_PORT; default 8000]"),
    ] = None,
    migrate_db: Annotated[
        bool, typer.Option("--migrate/--no-migrate", help="Migrate the schema before serving")
    ] = True,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="With MEMBRIDGE_DEV and no admin key, serve beyond loopback anyway "
            "[env BLOOM_INSECURE]",
        ),
    ] = False,
) -> None:
    """Serve the control plane API (default 127.0.0.1:8000)."""
    import uvicorn

    from bloom.cli.logs import configure_logging
    from bloom.membridge.app import create_app
    from bloom.web.settings import SettingsError

    settings, target = _settings(host=host, port=port, insecure=insecure or None)
    try:
        settings.check_auth()
    except SettingsError as exc:
        fail(str(exc), 2)
    configure_logging(settings.log_level, settings.log_format)
    if migrate_db and settings.migrate_on_start:
        _upgrade(target)
    uvicorn.run(create_app(settings), **uvicorn_options(settings.host, settings.port))


@db_app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Migrate Membridge's database (BLOOM_MEMBRIDGE_DATABASE_URL, or SQLite membridge.db)."""
    from bloom.membridge.storage.schema import SCHEMA

    _, target = _settings()
    typer.echo(f"Migrating {target.display} to {revision} …")
    _upgrade(target, revision)
    typer.echo(f"At revision {SCHEMA.current_revision(target)}.")


@db_app.command()
def current() -> None:
    """Show the database's Membridge schema revision and the newest one this version knows."""
    from bloom.membridge.storage.schema import SCHEMA

    _, target = _settings()
    typer.echo(f"database: {SCHEMA.current_revision(target) or 'empty'}")
    typer.echo(f"head:     {SCHEMA.head_revision()}")
