"""`bloom bench`: its cycle and depth modes against a real server on both databases, its bulk
queue fill, its HTTP client, and its command line (JSON output, usage errors, Ctrl-C)."""

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from bloom.bench.dashboard import DashboardOptions, run_dashboard
from bloom.bench.http import Endpoint, HttpConnection
from bloom.bench.runner import BenchOptions, run_bench
from bloom.bench.stats import Latency, percentile
from bloom.db.database import resolve_database
from bloom.runtime.container import Container
from bloom.runtime.services.tasks import NewTask, TaskFilter
from bloom.runtime.storage import bulk, bulk_history
from bloom.runtime.storage.tables import llm_results, llm_tasks, workers

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


def _counts(database_url: str, tmp_path: Path) -> dict[str, int]:
    """Tasks by status, results and workers, read straight from the database."""
    engine = create_engine(resolve_database(database_url, tmp_path).sync_url)
    try:
        with engine.connect() as conn:
            by_status = select(llm_tasks.c.status, func.count()).group_by(llm_tasks.c.status)
            counts = {status: n for status, n in conn.execute(by_status)}
            counts["results"] = conn.execute(select(func.count()).select_from(llm_results)).one()[0]
            counts["workers"] = conn.execute(select(func.count()).select_from(workers)).one()[0]
            return counts
    finally:
        engine.dispose()


def _assert_latency(latency: Latency) -> None:
    assert latency.count > 0
    assert latency.p50_ms is not None
    assert latency.p99_ms is not None
    assert 0 < latency.p50_ms <= latency.p99_ms


async def test_cycle_mode_completes_every_task_it_creates(database_url: str, tmp_path: Path):
    """Four simulated workers cycle for 2 s against a server the bench starts: cycles are
    counted, no request fails, both latencies are reported, and afterwards every task the run
    created is completed with one result, and its workers are unregistered."""
    options = BenchOptions(workers=4, duration=2.0, warmup=0.5, database_url=database_url)
    result = await run_bench(options)

    report = result.cycle
    assert report is not None
    assert result.depth is None
    assert report.errors == 0, report.error_samples
    assert report.cycles > 0
    assert report.cycles_per_sec == round(report.cycles / 2.0, 1)
    _assert_latency(report.claim)
    _assert_latency(report.create_to_claim)
    assert report.client_cpu_ms_per_request is not None
    # the bench's own server on Linux, and a PostgreSQL of this machine: their CPU, within all
    # the machine's, per cycle (SQLite's work is the server's own)
    server, database = report.server_cpu_ms_per_cycle, report.database_cpu_ms_per_cycle
    assert server is not None
    assert report.machine_cpu_ms_per_cycle is not None
    if database_url.startswith("sqlite"):
        assert database is None
        assert 0 < server < report.machine_cpu_ms_per_cycle
    else:
        assert database is not None
        assert server > 0
        assert database > 0
        assert server + database < report.machine_cpu_ms_per_cycle
    assert result.context.storage == database_url.split(":", 1)[0]
    assert result.context.server_processes == 1
    counts = _counts(database_url, tmp_path)
    assert counts["completed"] >= report.cycles
    assert counts == {
        "completed": counts["completed"],
        "results": counts["completed"],
        "workers": 0,
    }


async def test_depth_mode_fills_to_each_depth_and_times_claims(database_url: str, tmp_path: Path):
    """Depths 100 then 1000: the queue is filled to exactly each depth (the second fill adds only
    the difference), claims are timed at each, and each claimed task is completed."""
    options = BenchOptions(depths=[1000, 100], claims=100, database_url=database_url)
    result = await run_bench(options)

    report = result.depth
    assert report is not None
    assert report.errors == 0, report.error_samples
    assert [r.depth for r in report.results] == [100, 1000]
    first, second = report.results
    # depth 100: half the queue minus the 4 workers' 2 warm-up claims; depth 1000: all 100
    assert (first.claim.count, second.claim.count) == (42, 100)
    assert (first.empty_claims, second.empty_claims) == (0, 0)
    assert first.inserted == 100
    assert second.inserted == 1000 - (100 - 42 - 8)
    for r in report.results:
        _assert_latency(r.claim)
    assert first.p50_ratio == 1.0
    assert second.p50_ratio is not None
    assert second.p50_ratio > 0
    claimed = 42 + 8 + 100 + 8
    assert _counts(database_url, tmp_path) == {
        "queued": 1050 - claimed,
        "completed": claimed,
        "results": claimed,
        "workers": 0,
    }


async def test_bulk_rows_are_the_tasks_the_api_creates(
    container: Container, database_url, tmp_path
):
    """A bulk-inserted task carries the same column values as one the API creates (apart from
    its id, context and timestamps), has a UUIDv7 id of its creation millisecond, reads back as
    a task, and the fill stops at the exact total or refuses when more are queued."""
    made, _ = await container.tasks.create(
        NewTask(context_id="c", agent_slug=bulk.AGENT_SLUG, prompt="bench depth task")
    )
    target = resolve_database(database_url, tmp_path)
    assert bulk.fill_queue(target, 3) == 2
    assert bulk.fill_queue(target, 3) == 0
    with pytest.raises(bulk.QueueTooDeep):
        bulk.fill_queue(target, 2)
    bulk.settle(target)

    async with container.db.read() as tx:
        rows = [dict(row) for row in await tx.connection.execute(select(llm_tasks))]
    assert len(rows) == 3
    varying = {"id", "context_id", "created_at", "updated_at", "queued_at", "request_hash"}
    api_row = next(row for row in rows if row["id"] == made.id)
    bulk_rows = [row for row in rows if row["id"] != made.id]
    expected = {k: v for k, v in api_row.items() if k not in varying}
    for row in bulk_rows:
        assert {k: v for k, v in row.items() if k not in varying} == expected
        assert row["created_at"] == row["updated_at"] == row["queued_at"]
        task_id = uuid.UUID(row["id"])
        assert (task_id.version, task_id.variant) == (7, uuid.RFC_4122)
        assert task_id.int >> 80 == row["created_at"]
        assert (await container.tasks.get(row["id"])).status == "queued"
    assert len({row["context_id"] for row in rows}) == 3


def _fill_status(g: int) -> str:
    """The status `bulk_history` gives task number g (1, 2, …)."""
    percent = g % 100
    bounds = [(70, "completed"), (78, "failed"), (80, "dead"), (83, "cancelled"), (95, "queued")]
    bounds.append((97, "leased"))
    return next((name for bound, name in bounds if percent < bound), "running")


async def test_dashboard_mode_times_every_read(database_url: str, tmp_path: Path):
    """Dashboard mode fills the database to the number of tasks asked for, times each read as
    many times as asked, and reports what each read returned; a second run reuses the fill."""
    options = DashboardOptions(tasks=400, runs=2, database_url=database_url)
    report = await run_dashboard(options)
    assert (report.tasks, report.inserted) == (400, 400)
    assert report.storage == resolve_database(database_url, tmp_path).kind
    for timing in report.timings:
        assert timing.runs == 2
        assert 0 < timing.median_ms <= timing.p95_ms, timing
    statuses = [_fill_status(g) for g in range(1, 401)]
    worker_3 = [
        g for g in range(1, 401) if g % 16 == 3 and statuses[g - 1] not in ("queued", "cancelled")
    ]
    rows = {timing.read: timing.rows for timing in report.timings}
    # the overview: the recent tasks' table (a header and 8), then today's cost (a header and a
    # row per agent that finished work since 00:00 UTC: up to five, none just after midnight),
    # and with it the cost per agent CLI (a header and a row: the fill's tasks are Claude's)
    by_cli = 1 + 1
    for overview in ("page: / (overview, last hour)", "page: /?window=day"):
        assert rows.pop(overview) in (1 + 8, *range(1 + 8 + 2 + by_cli, 1 + 8 + 1 + 5 + 1 + by_cli))
    kept = rows.pop("usage: today by project (the overview's cost)")
    assert kept in range(6)
    assert rows.pop("usage: today by project, scanned (`GET /usage`)") == kept
    assert (
        rows
        == {
            "overview: 1 h, 1-min buckets": 60,
            "overview: 24 h, 15-min buckets": 96,
            "tasks: no filter": 50,
            "tasks: status queued": statuses.count("queued"),  # 48
            "tasks: status dead (2 %)": statuses.count("dead"),  # 8
            "tasks: text 'topic 42' (1.1 %)": 1,  # ticket 42 (420… are not filled)
            "tasks: text matching 1 task": 1,
            "tasks: deep cursor (middle)": 50,
            "tasks: deep cursor, status failed": statuses[:199].count("failed"),  # older than 200
            "tasks: worker": min(len(worker_3), 50),
            "tasks: worker, status dead": [statuses[g - 1] for g in worker_3].count("dead"),
            "tasks: worker, status cancelled (none)": 0,
            "tasks: context": 1,
            "tasks: agent": 50,  # 80 of dash-agent-3
            "tasks: agent, status dead": [s for g, s in enumerate(statuses, 1) if g % 5 == 3].count(
                "dead"
            ),
            "tasks: agent with no tasks": 0,
            "tasks: counts per status": 9,
            "stats": 7,  # statuses some task is in
            "audit: no filter": 50,
            "audit: one task's entries": 3,  # task 200: created, leased, completed
            # the pages: table rows, a header row each
            "page: /tasks": 1 + 50,
            "page: /tasks?status=queued": 1 + statuses.count("queued"),
            "page: /tasks?agent=…": 1 + 50,
            "page: /tasks?q=… (1 task)": 1 + 1,  # ticket 133
            "page: /tasks, deep cursor (middle)": 1 + 50,
            "page: /tasks/{id}": 1 + 1,  # task 200's one attempt
            "page: /audit": 1 + 50,
            "route: GET /api/runtime/stats": 1,
        }
    )
    again = await run_dashboard(options)
    assert (again.tasks, again.inserted) == (400, 0)


async def test_history_fill_holds_what_a_runtime_would(
    container: Container, database_url: str, tmp_path: Path
):
    """The dashboard fill's tasks, leases, results and samples read back through the services
    as a served runtime's would: statuses by the documented shares, every attempted task's
    lease its current one, a result per ended task, UUIDv7 ids of their creation time."""
    target = resolve_database(database_url, tmp_path)
    now = container.history.clock()
    assert bulk_history.fill_history(target, 300, now_ms=now) == 300
    assert bulk_history.fill_history(target, 300, now_ms=now) == 0
    bulk_history.settle(target)
    assert await container.tasks.counts() == {
        "queued": 36,
        "leased": 6,
        "running": 9,
        "completed": 210,
        "failed": 24,
        "dead": 6,
        "cancelled": 9,
        "awaiting_approval": 0,
        "blocked": 0,
    }
    page = await container.tasks.page(TaskFilter(), after=None, limit=500)
    assert len(page.items) == 300
    for task in page.items:
        assert uuid.UUID(task.id).int >> 80 == task.created_at
        attempts = await container.records.attempts(task.id)
        results = await container.records.results(task.id)
        attempted = task.status not in ("queued", "cancelled")
        assert [lease.id for lease in attempts] == ([task.lease_id] if attempted else [])
        ended = task.status in ("completed", "failed", "dead")
        assert [r.status for r in results] == (
            ["success" if task.status == "completed" else "error"] if ended else []
        )
        assert all(r.completed_at == task.updated_at < now for r in results)
        in_flight = task.status in ("leased", "running")
        assert [lease.status for lease in attempts] == (
            ["active" if in_flight else "released"] if attempted else []
        )
    # the tasks span two days; samples, the day before the fill
    overview = await container.history.overview(window_ms=3 * 86_400_000, bucket_ms=3_600_000)
    assert overview.active_leases == 15
    assert sum(b.succeeded + b.failed for b in overview.throughput) == 240
    assert len(overview.depth) == 24 * 60
    assert overview.failure_rate == pytest.approx(30 / 240)


async def test_http_client_handles_204_chunked_and_a_closed_connection():
    """The bench's client reads a 204, a Content-Length body and a chunked body on one
    keep-alive connection, and reconnects after the server closes it."""
    replies = [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"a": 11}',
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4\r\n{"b"\r\n4\r\n: 2}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]",
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnull",
    ]
    connections = 0
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
            seen.append(head.split(b"\r\n", 1)[0] + b" " + await reader.readexactly(length))
            reply = replies.pop(0)
            writer.write(reply)
            await writer.drain()
            if b"Connection: close" in reply:
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = HttpConnection(Endpoint.from_url(f"http://127.0.0.1:{port}/prefix"))
    try:
        got = [await conn.request("POST", "/x", {"n": i}) for i in range(4)]
        await asyncio.sleep(0.05)  # let the close arrive
        got.append(await conn.request("GET", "/y"))
    finally:
        conn.close()
        server.close()
    assert [(r.status, r.json()) for r in got] == [
        (204, None),
        (200, {"a": 11}),
        (201, {"b": 2}),
        (200, []),
        (200, None),
    ]
    assert seen[0] == b'POST /prefix/x HTTP/1.1 {"n":0}'
    assert seen[-1] == b"GET /prefix/y HTTP/1.1 "
    assert connections == 2


def test_percentiles_are_nearest_rank():
    """p50, p99 and mean of 1..100 ms are 50, 99 and 50.5 ms; no samples means no figures."""
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    latency = Latency.of([i / 1000 for i in range(100, 0, -1)])
    assert (latency.count, latency.p50_ms, latency.p99_ms) == (100, 50.0, 99.0)
    assert latency.mean_ms == 50.5
    assert Latency.of([]) == Latency(0, None, None)


def test_cli_prints_one_json_object(tmp_path: Path):
    """`bloom bench --json` with no database given runs on a fresh SQLite file and prints
    exactly one JSON object with the figures and their context."""
    done = subprocess.run(
        [*BLOOM, "bench", "--workers", "4", "--duration", "1", "--warmup", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["mode"] == "cycle"
    assert out["errors"] == 0
    assert out["cycles"] > 0
    assert out["claim_latency"]["p50_ms"] > 0
    assert 0 < out["server_cpu_ms_per_cycle"] < out["machine_cpu_ms_per_cycle"]
    assert out["context"]["storage"] == "sqlite"
    assert out["context"]["server_processes"] == 1
    assert list(tmp_path.iterdir()) == []  # nothing left in the working directory


def test_cli_rejects_depth_against_a_url_without_its_database():
    """Depth mode fills the database directly, so with --url it needs --database-url."""
    done = subprocess.run(
        [*BLOOM, "bench", "--url", "http://127.0.0.1:9", "--depth", "100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--database-url" in done.stderr


def test_ctrl_c_stops_the_server_it_started():
    """Ctrl-C in the middle of a run ends the bench and the server it started."""
    bench = subprocess.Popen(
        [*BLOOM, "bench", "--workers", "2", "--duration", "120"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert bench.stderr is not None
        found = None
        for line in bench.stderr:
            found = re.search(r"runtime started: http://127\.0\.0\.1:(\d+)", line)
            if found:
                break
        assert found, "the bench did not report its server"
        port = int(found[1])
        bench.send_signal(signal.SIGINT)
        assert bench.wait(timeout=30) == 130
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0  # refused: the server is gone
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


async def test_the_benchs_server_moves_off_a_port_taken_before_it_bound(
    tmp_path, monkeypatch
) -> None:
    """free_port() closes the port it found; another process may bind it first."""
    import socket

    from bloom.bench import server as bench_server

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real_free_port = bench_server.free_port
    monkeypatch.setattr(bench_server, "free_port", lambda: next(ports, None) or real_free_port())
    try:
        own = bench_server.OwnServer(f"sqlite:///{tmp_path / 'b.db'}", 1, tmp_path)
        async with own as endpoint:
            assert endpoint.port != taken.getsockname()[1]
            assert await bench_server.answers(endpoint, "/api/runtime/health")
    finally:
        taken.close()
