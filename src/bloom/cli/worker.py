"""`bloom worker …`: run a worker on this machine; list the runtime's workers."""

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bloom.cli.output import fail, print_json
from bloom.cli.remote import (
    DEFAULT_URL,
    JsonOption,
    UrlOption,
    ago,
    call,
    err,
    out,
    styled_status,
)
from bloom.domain.fleet import WORKER_ID

if TYPE_CHECKING:
    from bloom.worker.settings import WorkerSettings

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


def _name(value: str | None) -> str | None:
    if value is not None and not WORKER_ID.match(value):
        raise typer.BadParameter(
            "letters, digits and . _ : @ - only, at most 128, starting with a letter or digit"
        )
    return value


def worker_settings(**overrides: object) -> "WorkerSettings":
    """The worker's settings from the environment and the options, or one red line, exit 2."""
    from bloom.web.settings import SettingsError
    from bloom.worker.settings import load_worker_settings

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return load_worker_settings(**given)
    except SettingsError as exc:
        fail(str(exc), 2)


@app.command()
def run(
    name: Annotated[
        str | None,
        typer.Option(
            callback=_name, help="Worker name (env BLOOM_WORKER_NAME; default: the host name)"
        ),
    ] = None,
    runtime_url: Annotated[
        str | None,
        typer.Option(help=f"The runtime (env BLOOM_RUNTIME_URL; default {DEFAULT_URL})"),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=32, help="Tasks run at once (env BLOOM_WORKER_CONCURRENCY; 1)"),
    ] = None,
    membridge_url: Annotated[
        str | None,
        typer.Option(help="Membridge, to register there too (env BLOOM_MEMBRIDGE_URL)"),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="A label for routing; repeatable (env BLOOM_WORKER_LABELS)"),
    ] = None,
    claude_bin: Annotated[
        str | None, typer.Option(help="The Claude CLI (env BLOOM_CLAUDE_BIN; default claude)")
    ] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option(help="Where tasks run (env BLOOM_WORKER_WORK_DIR; <data dir>/worker/<name>)"),
    ] = None,
    project_dir: Annotated[
        Path | None,
        typer.Option(help="Where context hints are looked up (env BLOOM_WORKER_PROJECT_DIR)"),
    ] = None,
    agent_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Also serve the node-agent surface here, so the runtime can dispatch to this "
            "worker (env BLOOM_WORKER_AGENT_PORT)",
        ),
    ] = None,
    claim: Annotated[
        bool | None,
        typer.Option(
            "--claim/--no-claim",
            help="Claim queued tasks; --no-claim: only run what is dispatched to the agent "
            "(env BLOOM_WORKER_CLAIM; claim)",
        ),
    ] = None,
    agent_host: Annotated[
        str | None,
        typer.Option(
            help="Where the agent surface listens (env BLOOM_WORKER_AGENT_HOST; 127.0.0.1)"
        ),
    ] = None,
    allow_clone: Annotated[
        bool | None,
        typer.Option(
            "--allow-clone/--no-allow-clone",
            help="Serve the agent's /clone: the runtime's projects cloned with git under "
            "BLOOM_WORKER_REPOS_BASE (~/projects); needs BLOOM_AGENT_KEY "
            "(env BLOOM_WORKER_ALLOW_CLONE; no)",
        ),
    ] = None,
    allow_process_control: Annotated[
        bool | None,
        typer.Option(
            "--allow-process-control/--no-allow-process-control",
            help="Serve the agent's /restart, /self-update and /uninstall (the runtime's "
            "agent-restart, agent-update, agent-uninstall); needs BLOOM_AGENT_KEY "
            "(env BLOOM_WORKER_ALLOW_PROCESS_CONTROL; no)",
        ),
    ] = None,
) -> None:
    """Claim tasks from the runtime and run each with the Claude CLI, until SIGTERM or Ctrl-C
    (running tasks may finish: BLOOM_WORKER_DRAIN_TIMEOUT_SEC)."""
    settings = worker_settings(
        name=name,
        runtime_url=runtime_url,
        max_concurrency=concurrency,
        membridge_url=membridge_url,
        labels=label or None,
        claude_bin=claude_bin,
        work_dir=work_dir,
        project_dir=project_dir,
        agent_port=agent_port,
        agent_host=agent_host,
        claim=claim,
        allow_clone=allow_clone,
        allow_process_control=allow_process_control,
    )
    from bloom.cli.logs import configure_logging
    from bloom.worker.main import run_worker  # only this command needs the worker's code

    configure_logging(settings.log_level, settings.log_format)

    raise typer.Exit(run_worker(settings))


@app.command("list")
def list_workers(
    json_output: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """The runtime's workers: status, load, labels, when last heard of."""
    workers = call(url, lambda client: client.list_workers())
    if json_output:
        print_json([worker.raw for worker in workers])
        return
    if not workers:
        err().print("no workers")
        return
    now = time.time_ns() // 1_000_000
    paused = any(worker.paused_until for worker in workers)
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["id", "status", "active/max", "labels", "last heartbeat"]
    for column in [*columns, *(["paused until"] if paused else [])]:
        table.add_column(column, no_wrap=True)
    for worker in workers:
        row = [
            escape(worker.id),
            styled_status(worker.status),
            f"{worker.active_leases}/{worker.capabilities.get('max_concurrency', 1)}",
            escape(", ".join(worker.labels) or "-"),
            ago(worker.last_heartbeat, now),
        ]
        if paused:
            until = worker.paused_until
            row.append(ago(until, now) if until and until > now else "-")
        table.add_row(*row)
    out().print(table)
