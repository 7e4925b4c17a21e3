"""`bloom worker …`: run a worker on this machine; list the runtime's workers, approve their agent
URLs, print a node's agent key."""

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import structlog
import typer
from rich.markup import escape
from rich.table import Table

from bloom.cli.output import fail, print_json, say
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
log = structlog.get_logger("bloom.worker")
AGENT_INSECURE = "the agent surface has no agent key: anyone who can reach it may call it"


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
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Serve the agent surface beyond loopback without an agent key (anyone may "
            "call it) [env BLOOM_INSECURE]",
        ),
    ] = False,
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
        insecure=insecure or None,
    )
    from bloom.cli.logs import configure_logging
    from bloom.web.settings import SettingsError
    from bloom.worker.main import run_worker  # only this command needs the worker's code

    try:
        settings.check_exposure()
    except SettingsError as exc:
        fail(str(exc), 2)
    configure_logging(settings.log_level, settings.log_format)
    if settings.agent_open_to_network:
        log.warning("agent_insecure", message=AGENT_INSECURE, host=settings.agent_host)

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
    proposed = any(worker.pending_url for worker in workers)
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["id", "status", "active/max", "labels", "last heartbeat"]
    extra = [*(["paused until"] if paused else []), *(["URL to approve"] if proposed else [])]
    for column in [*columns, *extra]:
        table.add_column(column, no_wrap=True)
    for worker in workers:
        row = [
            escape(worker.id),
            styled_status(worker.status) + (", [red]not ready[/]" if worker.not_ready else ""),
            f"{worker.active_leases}/{worker.capabilities.get('max_concurrency', 1)}",
            escape(", ".join(worker.labels) or "-"),
            ago(worker.last_heartbeat, now),
        ]
        if paused:
            until = worker.paused_until
            row.append(ago(until, now) if until and until > now else "-")
        if proposed:
            row.append(escape(worker.pending_url or "-"))
        table.add_row(*row)
    out().print(table)
    for worker in workers:
        if worker.not_ready:
            err().print(f"{escape(worker.id)} is not ready: {escape(worker.not_ready)}")
    if proposed:
        err().print("a URL to approve: `bloom worker approve NAME` once you know it is the node's")


@app.command("approve")
def approve(
    name: Annotated[str, typer.Argument(help="The worker whose proposed agent URL to approve")],
    agent_url: Annotated[
        str | None,
        typer.Option(
            "--agent-url",
            help="The URL you expect it to propose: refused if the proposal is another",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Approve the agent URL a worker (with its worker key) or Membridge proposed: from then on
    the runtime dispatches and sends agent operations there, with the node's own key."""
    worker = call(url, lambda client: client.approve_worker_url(name, agent_url))
    out().print(f"{escape(worker.id)}: agent URL {escape(worker.url)} approved")


@app.command("gc")
def gc(
    retention_hours: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Remove worktrees unused this long (BLOOM_WORKER_WORKSPACE_RETENTION_HOURS, 24).",
        ),
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option(help="The worker's work dir (BLOOM_WORKER_WORK_DIR).")
    ] = None,
    name: Annotated[str | None, typer.Option(callback=_name, help="The worker's name.")] = None,
) -> None:
    """Remove the workspaces' worktrees this worker has not used for the retention, and, while
    free space is short, the least recently used ones first; print each one removed."""
    import asyncio

    from bloom.worker import workspace_gc

    settings = worker_settings(work_dir=work_dir, name=name)
    hours = settings.workspace_retention_hours if retention_hours is None else retention_hours
    removed = asyncio.run(
        workspace_gc.collect(
            settings.workspaces_dir,
            time.time(),
            hours * 3600,
            settings.workspace_min_free_mb * 1024 * 1024,
        )
    )
    for path in removed:
        print(path)
    say(f"{len(removed)} worktree{'' if len(removed) == 1 else 's'} removed")


@app.command("agent-key")
def agent_key(
    name: Annotated[str, typer.Argument(help="The worker (node) the key is for")],
) -> None:
    """Print the agent key of one node, derived from the fleet's agent key in this environment
    (MEMBRIDGE_AGENT_KEY, as the runtime reads it): set it as that node's MEMBRIDGE_AGENT_KEY
    (BLOOM_AGENT_KEY). The fleet's key itself never leaves the servers."""
    from bloom.cli.common import runtime_settings
    from bloom.domain.fleet import node_agent_key

    if not WORKER_ID.fullmatch(name):
        fail(f"not a worker name: {name!r}", 2)
    settings, _ = runtime_settings()
    fleet_key = settings.agent_key.get_secret_value()
    if not fleet_key:
        fail("no fleet agent key here: set MEMBRIDGE_AGENT_KEY (as the runtime has it)", 2)
    print(node_agent_key(fleet_key, name))
