"""What several commands share: settings and the database target, with clean errors."""

import typer

from bloom.settings import RuntimeSettings, SettingsError, load_runtime_settings
from bloom.storage.database import DatabaseTarget, DatabaseUrlError, resolve_database


def runtime_settings(**overrides: object) -> tuple[RuntimeSettings, DatabaseTarget]:
    """The runtime's settings and database, or a one-line error and exit status 2."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = load_runtime_settings(**given)
        return settings, resolve_database(settings.database_url, settings.data_dir)
    except (SettingsError, DatabaseUrlError) as exc:
        typer.secho(f"bloom: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
