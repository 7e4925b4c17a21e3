"""What several commands share: settings and the database target, with clean errors."""

from typing import NoReturn

import typer

from bloom.settings import RuntimeSettings, SettingsError, load_runtime_settings
from bloom.storage.database import DatabaseTarget, DatabaseUrlError, resolve_database


def runtime_settings(**overrides: object) -> tuple[RuntimeSettings, DatabaseTarget]:
    """The runtime's settings and database, or a one-line error and exit status 2."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = load_runtime_settings(**given)
        return settings, resolve_database(settings.database_url, settings.data_dir)
    except SettingsError as exc:
        _fail(str(exc))
    except DatabaseUrlError as exc:
        _fail(f"BLOOM_DATABASE_URL or DATABASE_URL: {exc}")


def _fail(message: str) -> NoReturn:
    typer.secho(f"bloom: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)
