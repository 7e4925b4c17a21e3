"""`bloom bench`: the lease engine's throughput and claim latency, measured through HTTP."""

import asyncio
import signal
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated, Any, TypeVar

import typer
import uvloop
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from bloom.bench import dashboard as dashboard_mode
from bloom.bench import drain as drain_mode
from bloom.bench import fleet as fleet_mode
from bloom.bench import graph as graph_mode
from bloom.bench import soak as soak_mode
from bloom.bench import worker_overhead as overhead_mode
from bloom.bench.http import HttpClientError
from bloom.bench.report import as_json, render
from bloom.bench.runner import BenchOptions, BenchResult, BenchUsageError, run_bench
from bloom.bench.server import ModeUsageError, ServerError
from bloom.cli.output import print_json
from bloom.db.database import DatabaseUrlError
from bloom.runtime.storage import bulk

T = TypeVar("T")


def _depths(value: str | None) -> list[int]:
    if not value:
        return []
    try:
        return [int(part.strip().replace("_", "")) for part in value.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter("a comma list of numbers, e.g. 1000,100000,1000000") from None


def bench(
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=1, max=512, help="Simulated workers.")
    ] = 16,
    duration: Annotated[
        float, typer.Option(min=0.1, help="Measured seconds (after the warm-up).")
    ] = 10.0,
    warmup: Annotated[float, typer.Option(min=0, help="Warm-up seconds, not counted.")] = 2.0,
    url: Annotated[
        str | None,
        typer.Option(
            help="Benchmark this running runtime (http://host:port) instead of starting one. "
            "Its queue must hold no other work: the simulated workers claim whatever is queued."
        ),
    ] = None,
    api_key: Annotated[
        str, typer.Option(help="X-Runtime-API-Key for --url.", envvar="BLOOM_BENCH_API_KEY")
    ] = "",
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Database of the server the bench starts (default: a fresh SQLite file in a "
            "temp dir). A postgresql://… database must be empty of other work; it is migrated "
            "and keeps the bench's tasks afterwards. With --url and --depth: that server's "
            "database, where the queue is filled."
        ),
    ] = None,
    server_workers: Annotated[
        int,
        typer.Option(min=1, max=64, help="Processes of the server the bench starts (PostgreSQL)."),
    ] = 1,
    depth: Annotated[
        str | None,
        typer.Option(
            help="Depth mode: fill the queue to each of these depths (e.g. 1000,100000,1000000) "
            "by bulk insert and measure claim latency there, instead of running cycles."
        ),
    ] = None,
    claims: Annotated[
        int, typer.Option(min=1, help="Depth mode: claims timed at each depth.")
    ] = 300,
    dashboard: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Dashboard mode: fill the database to this many tasks (with their leases, "
            "results and audit entries) and time the dashboard's reads in-process, instead of "
            "running cycles. --database-url as for the server (default: a temp SQLite file).",
        ),
    ] = None,
    runs: Annotated[
        int, typer.Option(min=1, help="Dashboard mode: timed calls of each read.")
    ] = 30,
    soak: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Soak mode: run full cycles at --rate for this many seconds against a server of "
            "the bench's own, sampling its memory, descriptors and database every --sample-every "
            "seconds, instead of measuring throughput.",
        ),
    ] = None,
    rate: Annotated[
        float, typer.Option(min=0.1, help="Soak mode: full cycles per second, the whole fleet's.")
    ] = 20.0,
    sample_every: Annotated[
        float, typer.Option(min=0.5, help="Soak mode: seconds between samples.")
    ] = 60.0,
    fleet: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Fleet mode: this many workers long-poll at once against a server of the "
            "bench's own; its idle CPU, then --tasks tasks --interval apart: create-to-start "
            "latency, memory, and no task granted twice.",
        ),
    ] = None,
    tasks: Annotated[int, typer.Option(min=1, help="Fleet mode: tasks created.")] = 50,
    contexts: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Fleet mode: the tasks take turns over this many contexts (a context's next "
            "task is kept for the worker that ran its last one); default: one each.",
        ),
    ] = None,
    drain: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="Drain mode: queue this many tasks in batches, then --workers simulated workers "
            "empty the queue with one call per task (a complete that claims the next), against a "
            "server of the bench's own: drained tasks/s as the peers' benchmark counts them.",
        ),
    ] = None,
    batch: Annotated[
        int,
        typer.Option(
            min=1,
            max=drain_mode.MAX_BATCH,
            help="Drain mode: slots per worker; above 1, each call completes all the worker "
            "holds and claims up to this many (POST /workers/{id}/complete).",
        ),
    ] = 1,
    graph: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=graph_mode.MAX_TASKS,
            help="Graph mode: --rounds times, a graph made in one batch (a fan-in of this many "
            "dependencies, or with --shape layers this many tasks) and drained by --workers "
            "simulated workers, against a server of the bench's own: how soon a dependent is "
            "granted after its last dependency's complete, and each task completed, released "
            "and granted once.",
        ),
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Graph mode: graphs drained.")] = 10,
    shape: Annotated[
        graph_mode.Shape,
        typer.Option(
            help="Graph mode: a fan-in, or layers of --width tasks, each after the first "
            "waiting for 1 to 3 tasks of the layer before."
        ),
    ] = graph_mode.Shape.FAN_IN,
    width: Annotated[
        int | None, typer.Option(min=1, help="Graph mode, --shape layers: tasks per layer.")
    ] = None,
    interval: Annotated[
        float, typer.Option(min=0, help="Fleet mode: seconds between two creates.")
    ] = 0.1,
    idle: Annotated[
        float, typer.Option(min=0.5, help="Fleet mode: seconds the idle CPU is measured over.")
    ] = 10.0,
    worker_overhead: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Worker-overhead mode: a real `bloom worker run` and Claude CLI "
            "(BLOOM_CLAUDE_BIN, else on PATH, else .cache/claude-cli), the echo model and a "
            "server of the bench's own run this many tasks, one at a time: what the worker adds "
            "to each beyond the CLI's own run.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
) -> None:
    """Benchmark the lease engine through its HTTP API.

    Cycle mode (default): simulated workers loop create → claim → heartbeat → complete.

    Prints full cycles/s, p50/p99 claim latency and create-to-claim latency.

    Depth mode (--depth 1000,100000): claim latency with that many tasks queued.

    Dashboard mode (--dashboard 100000): the dashboard's reads at that many tasks.

    Soak mode (--soak 3600 --rate 20): a steady load for an hour; does anything grow?

    Fleet mode (--fleet 2000 --tasks 50): thousands of waiting workers; idle CPU, latency.

    Drain mode (--drain 3000 [--batch 4]): a full queue emptied with one call per task (or
    per batch); tasks/s.

    Graph mode (--graph 500 [--rounds 10]): fan-ins drained; the dependent's release latency.
    With --shape layers (--graph 1000 --shape layers [--width 100]): a layered graph drained.

    Worker-overhead mode (--worker-overhead 50): a real worker's own cost per task.

    Without --url it starts its own `bloom runtime serve`, and stops it afterwards.

    See docs/benchmarks.md.
    """
    err = Console(stderr=True)
    if batch != 1 and drain is None:
        raise typer.BadParameter("--batch goes with --drain")
    graph_options = _graph_options(
        graph,
        shape,
        width,
        graph_mode.GraphOptions(0, rounds, workers, database_url, server_workers),
    )
    if dashboard is not None:
        _in_process("--dashboard", url=url, depth=depth)
        _dashboard(dashboard_mode.DashboardOptions(dashboard, runs, database_url), err, json_output)
        return
    if worker_overhead is not None:
        _alone("--worker-overhead", url=url, depth=depth, soak=soak, fleet=fleet, drain=drain)
        overhead_options = overhead_mode.OverheadOptions(worker_overhead, database_url=database_url)
        err.print(
            f"worker overhead: runtime, echo model and worker starting; then "
            f"{overhead_options.warmup} + {worker_overhead} tasks, one at a time",
            highlight=False,
        )
        overhead = _own_server(overhead_mode.run_worker_overhead(overhead_options), err)
        ok = not overhead.errors
        _finish(overhead, overhead_mode.as_json, overhead_mode.render, json_output, ok)
        return
    if fleet is not None:
        _alone("--fleet", url=url, depth=depth, soak=soak)
        fleet_options = fleet_mode.FleetOptions(
            fleet,
            tasks,
            interval,
            idle,
            database_url=database_url,
            server_workers=server_workers,
            contexts=contexts,
        )
        err.print(f"fleet: {fleet} workers registering and waiting", highlight=False)
        fleet_report = _own_server(fleet_mode.run_fleet(fleet_options), err)
        _finish(fleet_report, fleet_mode.as_json, fleet_mode.render, json_output, fleet_report.safe)
        return
    if graph_options is not None:
        _alone("--graph", url=url, depth=depth, soak=soak, drain=drain)
        _graph(graph_options, err, json_output)
        return
    if drain is not None:
        _alone("--drain", url=url, depth=depth, soak=soak)
        drain_options = drain_mode.DrainOptions(drain, workers, database_url, server_workers, batch)
        err.print(f"drain: queueing {drain} tasks", highlight=False)
        drained = _own_server(drain_mode.run_drain(drain_options), err)
        _finish(drained, drain_mode.as_json, drain_mode.render, json_output, drained.safe)
        return
    if soak is not None:
        _alone("--soak", url=url, depth=depth)
        soak_options = soak_mode.SoakOptions(
            soak, rate, workers, sample_every, database_url, server_workers
        )

        # each sample a line on standard error as it is taken, the trends at the end
        def show(sample: soak_mode.Sample) -> None:
            err.print(soak_mode.sample_line(sample), highlight=False, soft_wrap=True)

        soaked = _own_server(soak_mode.run_soak(soak_options, show), err)
        _finish(soaked, soak_mode.as_json, soak_mode.render, json_output, not soaked.errors)
        return
    options = BenchOptions(
        workers=workers,
        duration=duration,
        warmup=warmup,
        url=url,
        api_key=api_key,
        database_url=database_url,
        server_workers=server_workers,
        depths=_depths(depth),
        claims=claims,
    )
    try:
        with _progress(err, options) as status, _failures(err):
            result = _run(options, status)
    except bulk.QueueTooDeep as exc:
        err.print(f"[bold red]bench failed:[/] {exc}; use an empty database", highlight=False)
        raise typer.Exit(1) from None
    if json_output:
        print_json(as_json(result))
    else:
        render(result, Console())
    report = result.cycle or result.depth
    if report is not None and report.errors:
        raise typer.Exit(1)


def _graph_options(
    graph: int | None,
    shape: graph_mode.Shape,
    width: int | None,
    common: graph_mode.GraphOptions,
) -> graph_mode.GraphOptions | None:
    """Graph mode's options (`common` with the graph's size, shape and width), or None without
    --graph; --shape and --width refused without it, --width without --shape layers."""
    if graph is None:
        if shape is not graph_mode.Shape.FAN_IN or width is not None:
            raise typer.BadParameter("--shape and --width go with --graph")
        return None
    if width is not None and shape is not graph_mode.Shape.LAYERS:
        raise typer.BadParameter("--width goes with --shape layers")
    options = replace(common, size=graph, shape=shape)
    return options if width is None else replace(options, width=width)


def _graph(options: graph_mode.GraphOptions, err: Console, json_output: bool) -> None:
    if options.shape is graph_mode.Shape.FAN_IN:
        graphs = f"fan-ins of {options.size}"
    else:
        graphs = f"layered graphs of {options.size} tasks"
    err.print(f"graph: {options.rounds} {graphs}", highlight=False)
    graphed = _own_server(graph_mode.run_graph(options), err)
    _finish(graphed, graph_mode.as_json, graph_mode.render, json_output, graphed.safe)


def _in_process(mode: str, **others: object) -> None:
    """Refuse a mode that runs in-process beside a server's options (`others`)."""
    if any(others.values()):
        raise typer.BadParameter(f"{mode} runs in-process: no --url, no --depth")


def _alone(mode: str, **others: object) -> None:
    """Refuse a mode that starts a server of its own beside the options of another kind of run
    (`others`: their values, None or "" when not given)."""
    if any(value not in (None, "") for value in others.values()):
        options = ", ".join(f"--{name}" for name in others)
        raise typer.BadParameter(f"{mode} starts a server of its own: no {options}")


def _dashboard(options: dashboard_mode.DashboardOptions, err: Console, json_output: bool) -> None:
    """Dashboard mode: fill, time the reads, print the figures (on uvloop, as the server runs)."""
    try:
        with _progress(err, BenchOptions(depths=[options.tasks])) as progress:
            task = progress.add_task(f"filling to {options.tasks:,} tasks", total=None)

            def advance(done: int, missing: int) -> None:
                progress.update(task, completed=done, total=missing)

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                report = runner.run(dashboard_mode.run_dashboard(replace(options, on_fill=advance)))
    except DatabaseUrlError as exc:
        raise typer.BadParameter(str(exc)) from None
    except KeyboardInterrupt:
        err.print("bench interrupted")
        raise typer.Exit(130) from None
    if json_output:
        print_json(dashboard_mode.as_json(report))
    else:
        dashboard_mode.render(report, Console())


def _own_server(mode: Coroutine[Any, Any, T], err: Console) -> T:
    """Run a mode that starts its own server (on uvloop, as the server runs), its failures as
    exits (`_failures`)."""
    with _failures(err), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_until_terminated(mode))
    raise AssertionError("unreachable")  # pragma: no cover - _failures raises or returns


def _finish(
    report: T,
    to_json: Callable[[T], dict[str, Any]],
    to_table: Callable[[T, Console], None],
    json_output: bool,
    ok: bool,
) -> None:
    """One JSON object or the mode's tables; exit 1 unless the run was `ok`."""
    if json_output:
        print_json(to_json(report))
    else:
        to_table(report, Console())
    if not ok:
        raise typer.Exit(1)


@contextmanager
def _failures(err: Console) -> Iterator[None]:
    """A server-starting mode's failures as exits: usage 2, failed 1, interrupted 130."""
    try:
        yield
    except (
        BenchUsageError,
        ModeUsageError,
        DatabaseUrlError,
    ) as exc:
        raise typer.BadParameter(str(exc)) from None
    except (ServerError, HttpClientError, RuntimeError) as exc:
        err.print(f"[bold red]bench failed:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("bench interrupted; its server, if any, was stopped")
        raise typer.Exit(130) from None


def _run(options: BenchOptions, progress: Progress) -> BenchResult:
    def on_fill(depth: int, _total: int) -> bulk.Progress:
        task = progress.add_task(f"filling queue to {depth:,}", total=None)

        def advance(done: int, missing: int) -> None:
            progress.update(task, completed=done, total=missing)

        return advance

    options.on_fill = on_fill
    options.on_server = lambda where: progress.console.print(
        f"runtime started: {where}", soft_wrap=True
    )
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_until_terminated(run_bench(options)))


async def _until_terminated(bench: Coroutine[Any, Any, T]) -> T:
    """Run `bench`; SIGTERM cancels it like Ctrl-C does, so its server is stopped too."""
    task = asyncio.ensure_future(bench)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await task
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@contextmanager
def _progress(console: Console, options: BenchOptions) -> Iterator[Progress]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        if not options.depths:
            seconds = options.warmup + options.duration
            progress.add_task(
                f"{options.workers} workers, {options.warmup:g} s warm-up + "
                f"{options.duration:g} s measured ({seconds:g} s)",
                total=None,
            )
        yield progress
