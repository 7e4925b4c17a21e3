"""`bloom echo-model serve`: the loopback stand-in for the Anthropic API
(see bloom.worker.echo_model)."""

from pathlib import Path
from typing import Annotated

import typer

from bloom.cli.output import fail

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's
ROUTINE_REQUESTS = {
    ("GET", "/_requests"): frozenset({200}),  # `bloom up`'s readiness probe
    ("HEAD", "/api/hello"): frozenset({200}),  # the Claude CLI's, before each run
}


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8100,
    git_root: Annotated[
        Path | None,
        typer.Option(
            help="Also serve the git repositories in this directory at /git/<name>.git (smart "
            "HTTP, pushes accepted), a demo repository made there first: bloom up's demo."
        ),
    ] = None,
) -> None:
    """Serve the echo model; point Claude at it with ANTHROPIC_BASE_URL=http://HOST:PORT."""
    import uvicorn

    from bloom.cli.logs import configure_logging
    from bloom.web.request_log import RequestLogMiddleware
    from bloom.web.settings import ServiceSettings, SettingsError, load_settings
    from bloom.worker.echo_model import create_app

    try:
        settings = load_settings(ServiceSettings)
    except SettingsError as exc:
        fail(str(exc), 2)
    configure_logging(settings.log_level, settings.log_format)
    if git_root is not None:
        from bloom.worker import echo_git

        echo_git.seed(git_root)
    app_ = create_app(git_root=git_root)
    served = RequestLogMiddleware(app_, server="model", routine=ROUTINE_REQUESTS)
    uvicorn.run(
        served, host=host, port=port, log_config=None, access_log=False, timeout_graceful_shutdown=3
    )
