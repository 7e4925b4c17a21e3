"""`bloom echo-model serve`: the loopback stand-in for the Anthropic API
(see bloom.worker.echo_model)."""

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8100,
) -> None:
    """Serve the echo model; point Claude at it with ANTHROPIC_BASE_URL=http://HOST:PORT."""
    import uvicorn

    from bloom.worker.echo_model import create_app

    uvicorn.run(create_app(), host=host, port=port, timeout_graceful_shutdown=3)
