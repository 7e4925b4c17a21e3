"""Dashboard mode (`bloom bench --dashboard 100000`): the read side the web dashboard calls, timed
in-process at scale.

The database is filled to the number of tasks asked for (`bulk_history`: tasks over two days with
their leases, results and audit entries, a day of queue depth samples; only what is missing is
inserted), settled like one that grew in service, then each read is called through the runtime's
own services (its container, as `bloom runtime serve` builds it, without HTTP) a few times to
warm up and `runs` times timed. The figures are server time: the service call, its SQL and the
driver's round trips, with no HTTP or JSON in front.

Then the dashboard's pages themselves (`page: …` rows) are asked of the runtime's app in-process
(httpx's ASGI transport, lifespan and middleware and all): what a page costs the server from the
request to its last byte, rendering included, with no socket in front.
"""

import asyncio
import os
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable, Sized
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bloom import __version__
from bloom.bench.stats import percentile
from bloom.db.database import resolve_database
from bloom.domain.clock import system_clock
from bloom.domain.history import Overview
from bloom.domain.paging import Cursor, Page
from bloom.domain.states import TaskStatus
from bloom.domain.usage import DayReport, UsageGroup, UsageReport
from bloom.runtime.app import create_app
from bloom.runtime.container import Container, build_container
from bloom.runtime.services.records import AuditFilter, Stats
from bloom.runtime.services.tasks import TaskFilter
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage import bulk, bulk_history
from bloom.runtime.storage.schema import SCHEMA

PAGE = 50
WARMUP_RUNS = 3
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class DashboardOptions:
    tasks: int = 100_000
    runs: int = 30
    database_url: str | None = None
    """Default: a fresh SQLite file in a temporary directory."""
    on_fill: bulk.Progress | None = None


@dataclass(frozen=True, slots=True)
class Timing:
    read: str
    runs: int
    median_ms: float
    p95_ms: float
    rows: int
    """What the last call returned: items of a page, buckets of an overview."""


@dataclass(frozen=True, slots=True)
class DashboardReport:
    tasks: int
    inserted: int
    fill_sec: float
    storage: str
    cpu_count: int | None
    python: str
    bloom_version: str
    timings: list[Timing]


Read = Callable[[], Awaitable[Any]]


async def run_dashboard(options: DashboardOptions) -> DashboardReport:
    with tempfile.TemporaryDirectory(prefix="bloom-bench-") as directory:
        data_dir = Path(directory)
        database_url = options.database_url or f"sqlite:///{data_dir / 'bench.db'}"
        target = resolve_database(database_url, data_dir)
        await asyncio.to_thread(SCHEMA.upgrade, target)
        started = time.perf_counter()
        inserted = await asyncio.to_thread(
            bulk_history.fill_history,
            target,
            options.tasks,
            now_ms=system_clock(),
            progress=options.on_fill,
        )
        if inserted:
            await asyncio.to_thread(bulk_history.settle, target)
        fill_sec = time.perf_counter() - started
        middle = await asyncio.to_thread(bulk_history.position_at, target, options.tasks // 2)
        settings = RuntimeSettings(database_url=database_url, data_dir=data_dir, access_log=False)
        container = build_container(settings)
        try:
            reads = _reads(container, options.tasks, Cursor(*middle))
            timings = [await _time(name, read, options.runs) for name, read in reads.items()]
        finally:
            await container.close()
        timings += await _time_pages(settings, Cursor(*middle), options.tasks, options.runs)
    return DashboardReport(
        tasks=options.tasks,
        inserted=inserted,
        fill_sec=round(fill_sec, 1),
        storage=str(target.kind),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        bloom_version=__version__,
        timings=timings,
    )


def _reads(container: Container, tasks: int, middle: Cursor) -> dict[str, Read]:
    history, records = container.history, container.records

    def page(task_filter: TaskFilter, after: Cursor | None = None) -> Read:
        return lambda: container.tasks.page(task_filter, after=after, limit=PAGE)

    def audit(audit_filter: AuditFilter) -> Read:
        return lambda: records.audit_page(audit_filter, after=None, limit=PAGE)

    return {
        "overview: 1 h, 1-min buckets": lambda: history.overview(
            window_ms=HOUR_MS, bucket_ms=60_000
        ),
        "overview: 24 h, 15-min buckets": lambda: history.overview(
            window_ms=24 * HOUR_MS, bucket_ms=900_000
        ),
        "tasks: no filter": page(TaskFilter()),
        "tasks: status queued": page(TaskFilter(status=TaskStatus.QUEUED)),
        "tasks: status dead (2 %)": page(TaskFilter(status=TaskStatus.DEAD)),
        "tasks: text 'topic 42' (1.1 %)": page(TaskFilter(text="topic 42")),
        "tasks: text matching 1 task": page(TaskFilter(text=f"ticket {tasks // 3} ")),
        "tasks: deep cursor (middle)": page(TaskFilter(), after=middle),
        "tasks: deep cursor, status failed": page(
            TaskFilter(status=TaskStatus.FAILED), after=middle
        ),
        "tasks: worker": page(TaskFilter(worker_id="dash-w3")),
        "tasks: worker, status dead": page(TaskFilter(worker_id="dash-w3", status=TaskStatus.DEAD)),
        "tasks: worker, status cancelled (none)": page(
            TaskFilter(worker_id="dash-w3", status=TaskStatus.CANCELLED)
        ),
        "tasks: context": page(TaskFilter(context_id="dash-ctx-17")),
        "tasks: agent": page(TaskFilter(agent_slug="dash-agent-3")),
        "tasks: agent, status dead": page(
            TaskFilter(agent_slug="dash-agent-3", status=TaskStatus.DEAD)
        ),
        "tasks: agent with no tasks": page(TaskFilter(agent_slug="dash-agent-none")),
        "tasks: counts per status": container.tasks.counts,
        "stats": records.stats,
        "usage: today by project (the overview's cost)": lambda: container.usage.today(
            UsageGroup.PROJECT, limit=8
        ),
        "usage: today by project, scanned (`GET /usage`)": lambda: container.usage.report(
            UsageGroup.PROJECT, limit=8
        ),
        "audit: no filter": audit(AuditFilter()),
        "audit: one task's entries": audit(AuditFilter(entity_id=middle.id)),
    }


PAGES = {
    "page: / (overview, last hour)": "/",
    "page: /?window=day": "/?window=day",
    "page: /tasks": "/tasks",
    "page: /tasks?status=queued": "/tasks?status=queued",
    "page: /tasks?agent=…": "/tasks?agent=dash-agent-3",
    "page: /tasks?q=… (1 task)": "/tasks?q=ticket+{rare}+",
    "page: /tasks, deep cursor (middle)": "/tasks?after={cursor}",
    "page: /tasks/{id}": "/tasks/{task}",
    "page: /audit": "/audit",
    "route: GET /api/runtime/stats": "/api/runtime/stats",
}


async def _time_pages(
    settings: RuntimeSettings, middle: Cursor, tasks: int, runs: int
) -> list[Timing]:
    """The pages, through the app in-process (no key set: the open development mode); the deep
    ones at the middle task, the text one a text only one task's prompt holds."""
    app = create_app(
        settings.model_copy(update={"membridge_retries": 0, "rate_limit_enabled": False})
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            values = {"task": middle.id, "cursor": middle.encode(), "rare": tasks // 3}

            def get(path: str) -> Read:
                async def read() -> httpx.Response:
                    answer = await client.get(path.format(**values))
                    answer.raise_for_status()
                    return answer

                return read

            return [await _time(name, get(path), runs) for name, path in PAGES.items()]


async def _time(name: str, read: Read, runs: int) -> Timing:
    for _ in range(WARMUP_RUNS):
        await read()
    seconds = []
    result: Any = None
    for _ in range(runs):
        started = time.perf_counter()
        result = await read()
        seconds.append(time.perf_counter() - started)
    seconds.sort()
    return Timing(
        read=name,
        runs=runs,
        median_ms=round(percentile(seconds, 0.5) * 1000, 2),
        p95_ms=round(percentile(seconds, 0.95) * 1000, 2),
        rows=_rows(result),
    )


def _rows(result: Any) -> int:
    if isinstance(result, httpx.Response):
        is_html = result.headers.get("content-type", "").startswith("text/html")
        return result.text.count("<tr") if is_html else 1
    if isinstance(result, Page):
        return len(result.items)
    if isinstance(result, Overview):
        return len(result.throughput)
    if isinstance(result, UsageReport | DayReport):
        return len(result.groups)
    if isinstance(result, Stats):
        return len(result.tasks["by_status"])  # type: ignore[arg-type]
    return len(result) if isinstance(result, Sized) else 0


def as_json(report: DashboardReport) -> dict[str, Any]:
    return {"mode": "dashboard"} | asdict(report)


def render(report: DashboardReport, console: Console) -> None:
    runs = report.timings[0].runs if report.timings else 0
    table = Table(
        title=f"bloom bench --dashboard: {report.tasks:,} tasks on {report.storage}",
        caption=f"server time of {runs} calls each",
    )
    table.add_column("read")
    for name in ("median", "p95", "rows"):
        table.add_column(name, justify="right")
    for timing in report.timings:
        table.add_row(
            timing.read, f"{timing.median_ms:.2f} ms", f"{timing.p95_ms:.2f} ms", str(timing.rows)
        )
    console.print(table)
    filled = f"{report.inserted:,} tasks inserted in {report.fill_sec:.1f} s"
    console.print(
        f"[dim]{filled if report.inserted else 'no tasks inserted'} · cpus {report.cpu_count} · "
        f"Python {report.python} · bloom {report.bloom_version}[/]"
    )
