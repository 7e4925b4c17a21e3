"""`bloom bench` as a coroutine: pick or start the server, run one mode, return its figures."""

import os
import platform
import tempfile
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bloom import __version__
from bloom.bench.api import RuntimeApi, Tally
from bloom.bench.backends import Backends
from bloom.bench.cycle import CycleReport, run_cycles
from bloom.bench.depth import DepthReport, FillProgress, run_depths
from bloom.bench.http import Endpoint
from bloom.bench.server import OwnServer
from bloom.db.database import StorageKind, resolve_database


class BenchUsageError(ValueError):
    """Options that do not go together."""


@dataclass(slots=True)
class BenchOptions:
    workers: int = 16
    duration: float = 10.0
    warmup: float = 2.0
    url: str | None = None
    api_key: str = ""
    database_url: str | None = None
    server_workers: int = 1
    depths: list[int] = field(default_factory=list)
    claims: int = 300
    depth_workers: int = 4
    on_fill: FillProgress | None = None
    on_server: Callable[[str], None] | None = None
    """Told the URL and log file of the server the bench started."""


@dataclass(frozen=True, slots=True)
class BenchContext:
    """What the figures depend on, printed next to them."""

    cpu_count: int | None
    storage: str
    server: str
    server_processes: int | None
    python: str
    platform: str
    bloom_version: str


@dataclass(frozen=True, slots=True)
class BenchResult:
    context: BenchContext
    cycle: CycleReport | None = None
    depth: DepthReport | None = None


def validate(options: BenchOptions) -> None:
    if options.url:
        try:
            Endpoint.from_url(options.url)
        except ValueError as exc:
            raise BenchUsageError(str(exc)) from None
    if options.depths and options.url and not options.database_url:
        raise BenchUsageError("--depth with --url needs --database-url: that server's database")
    if any(depth < 1 for depth in options.depths):
        raise BenchUsageError("depths must be positive")
    if options.server_workers > 1 and options.url:
        raise BenchUsageError("--server-workers applies to the server the bench starts, not --url")
    kind = (
        resolve_database(options.database_url, Path()).kind
        if options.database_url
        else StorageKind.SQLITE
    )
    if options.server_workers > 1 and not options.url and kind is StorageKind.SQLITE:
        raise BenchUsageError("--server-workers above 1 needs a postgresql:// --database-url")
    if options.api_key and not options.url:
        raise BenchUsageError("--api-key applies to --url; the bench's own server has no key")


async def run_bench(options: BenchOptions) -> BenchResult:
    """Run the benchmark the options describe (cycle mode, or depth mode with `depths`)."""
    validate(options)
    async with AsyncExitStack() as stack:
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bloom-bench-")))
        database_url = options.database_url or f"sqlite:///{data_dir / 'bench.db'}"
        if options.url:
            endpoint = Endpoint.from_url(options.url, options.api_key)
            processes = server_pid = None
        else:
            server = OwnServer(database_url, options.server_workers, data_dir)
            endpoint = await stack.enter_async_context(server)
            processes, server_pid = options.server_workers, server.pid
            if options.on_server is not None:
                options.on_server(f"{endpoint.url} (log: {server.log_path})")
        context = await _context(endpoint, processes)
        target = resolve_database(database_url, data_dir)
        if not options.depths:
            # the database's CPU too, when it is a PostgreSQL of this machine (with `--url` and
            # no `--database-url`, the target is the unused SQLite file: none)
            backends = await Backends.open(target)
            if backends is not None:
                stack.push_async_callback(backends.close)
            cycle = await run_cycles(
                endpoint,
                workers=options.workers,
                duration=options.duration,
                warmup=options.warmup,
                server_pid=server_pid,
                backends=backends,
            )
            return BenchResult(context, cycle=cycle)
        if target.kind != context.storage:
            raise BenchUsageError(
                f"--database-url is {target.kind} but the server stores in {context.storage}"
            )
        depth = await run_depths(
            endpoint,
            target,
            options.depths,
            claims=options.claims,
            workers=options.depth_workers,
            on_fill=options.on_fill,
        )
        return BenchResult(context, depth=depth)
    raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack may swallow


async def _context(endpoint: Endpoint, processes: int | None) -> BenchContext:
    api = RuntimeApi(endpoint, Tally())
    try:
        health = await api.health()
    finally:
        api.close()
    if not health:
        raise BenchUsageError(f"{endpoint.url}/api/runtime/health did not answer 200")
    return BenchContext(
        cpu_count=os.cpu_count(),
        storage=str(health.get("storage", "unknown")),
        server=endpoint.url,
        server_processes=processes,
        python=platform.python_version(),
        platform=platform.platform(terse=True),
        bloom_version=str(health.get("version", __version__)),
    )
