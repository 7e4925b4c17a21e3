"""`bloom runtime serve`: the runtime HTTP server."""

import os
from typing import Annotated

import structlog
import typer
import uvicorn

from bloom.cli.common import runtime_settings, uvicorn_options
from bloom.cli.logs import configure_logging
from bloom.cli.output import fail
from bloom.db.database import StorageKind
from bloom.runtime.api.system import INSECURE_WARNING
from bloom.runtime.app import create_app
from bloom.runtime.storage.schema import SCHEMA
from bloom.web.settings import SettingsError

app = typer.Typer(help="The runtime server.", no_args_is_help=True)
log = structlog.get_logger("bloom.runtime")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind [env BLOOM_HOST]")] = None,
    port: Annotated[int | None, typer.Option(help="Port [env BLOOM_PORT or PORT]")] = None,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="Server processes (PostgreSQL only)")
    ] = 1,
    migrate_db: Annotated[
        bool, typer.Option("--migrate/--no-migrate", help="Migrate the schema before serving")
    ] = True,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Serve beyond loopback without an API key (everything open) [env BLOOM_INSECURE]",
        ),
    ] = False,
) -> None:
    """Serve the runtime API (default 127.0.0.1:5000)."""
    settings, target = runtime_settings(host=host, port=port, insecure=insecure or None)
    try:
        settings.check_exposure()
    except SettingsError as exc:
        fail(str(exc), 2)
    configure_logging(settings.log_level, settings.log_format)
    if settings.serving_insecure:
        log.warning("runtime_insecure", message=INSECURE_WARNING, host=settings.host)
    if workers > 1 and target.kind is StorageKind.SQLITE:
        raise typer.BadParameter("several processes need PostgreSQL", param_hint="--workers")
    if migrate_db and settings.migrate_on_start:
        SCHEMA.upgrade(target)
    common = uvicorn_options(settings.host, settings.port)
    if workers == 1:
        uvicorn.run(create_app(settings), **common)
    else:  # the processes read their settings from the environment: pass ours on
        os.environ["BLOOM_HOST"] = settings.host
        os.environ["BLOOM_INSECURE"] = "true" if settings.insecure else "false"
        uvicorn.run(
            "bloom.runtime.app:create_app_from_env",
            factory=True,
            workers=workers,
            **common,
        )
