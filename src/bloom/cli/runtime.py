"""`bloom runtime serve`: the runtime HTTP server."""

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import structlog
import typer

from bloom.cli.common import runtime_settings, uvicorn_options
from bloom.cli.output import fail

if TYPE_CHECKING:  # the server's modules are imported by `serve`, not by `--help`
    from bloom.runtime.settings import RuntimeSettings

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's
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
    import uvicorn

    from bloom.cli.logs import configure_logging
    from bloom.db.database import StorageKind
    from bloom.runtime.api.system import INSECURE_WARNING
    from bloom.runtime.app import create_app
    from bloom.runtime.storage.schema import SCHEMA
    from bloom.web.collector import tune_for_serving
    from bloom.web.metrics import MULTIPROC_ENV
    from bloom.web.settings import SettingsError

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
    if settings.artifact_store == "s3":
        check_object_store(settings)
    if migrate_db and settings.migrate_on_start:
        SCHEMA.upgrade(target)
    common = uvicorn_options(settings.host, settings.port)
    if workers == 1:
        app = create_app(settings)
        tune_for_serving()
        uvicorn.run(app, **common)
    else:  # the processes read their settings from the environment: pass ours on
        os.environ[MULTIPROC_ENV] = str(shared_metrics_dir(settings.data_dir, settings.port))
        os.environ["BLOOM_HOST"] = settings.host
        os.environ["BLOOM_INSECURE"] = "true" if settings.insecure else "false"
        uvicorn.run(
            "bloom.runtime.app:create_app_from_env",
            factory=True,
            workers=workers,
            **common,
        )


def check_object_store(settings: "RuntimeSettings") -> None:
    """Reach the S3 store (and make its bucket) before serving: refuse to start in one line when
    it cannot be reached, or start degraded when BLOOM_S3_REQUIRED=false."""
    from bloom.objects.errors import ObjectStoreUnavailable
    from bloom.runtime.container import object_bucket

    bucket = object_bucket(settings)
    assert bucket is not None  # the settings require an endpoint for the s3 store

    async def reach() -> None:
        try:
            await bucket.ensure_bucket()
        finally:
            await bucket.close()

    try:
        asyncio.run(reach())
    except ObjectStoreUnavailable as exc:
        if settings.s3_required:
            fail(f"artifact store: {exc} (BLOOM_S3_REQUIRED=false starts without it)", 2)
        log.warning("artifact_store_unreachable", error=str(exc), degraded=True)


def shared_metrics_dir(data_dir: Path, port: int) -> Path:
    """Where the server processes of one `serve --workers N` keep their metrics (emptied first:
    counters start at zero with the server, as Prometheus expects of a restart)."""
    path = (data_dir / f"metrics-{port}").resolve()
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path
