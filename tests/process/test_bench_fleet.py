"""`bloom bench --fleet`: many workers long-polling at once against a server of its own, a
trickle of tasks; what it measures, on both databases, and its command line."""

import json
import subprocess
import sys

from bloom.bench.fleet import FleetOptions, run_fleet

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_fleet_measures_idle_cpu_latency_memory_and_no_double_grant(database_url: str):
    """60 waiting workers, 12 tasks 50 ms apart: each task started once and completed, a
    create-to-start latency for each, the server's idle CPU and memory read, no error."""
    options = FleetOptions(
        workers=60, tasks=12, interval=0.05, idle=1.0, wait=5.0, database_url=database_url
    )
    report = await run_fleet(options)
    assert report.errors == 0, report.error_samples
    assert (report.created, report.started, report.completed) == (12, 12, 12)
    assert report.granted_twice == 0
    assert report.safe
    assert report.start_latency.count == 12
    assert report.start_latency.p50_ms is not None
    assert 0 < report.start_latency.p50_ms <= report.start_latency.p99_ms  # type: ignore[operator]
    assert report.idle_cpu_percent >= 0
    assert report.rss_kb > 10_000
    assert report.superseded == 0
    assert 1 <= len(report.slowest) <= 5
    assert report.slowest[0][1] == max(ms for _, ms, _ in report.slowest)
    # registration, the first claims of 60 workers, and each task's claim and complete
    assert report.requests >= 60 + 60 + 12 * 2


async def test_fleet_tasks_that_share_contexts_all_run_once(database_url: str):
    """Tasks taking turns over two contexts (each context's next task kept for the worker that
    ran its last one): every one started once and completed, no grant superseded. (That they
    reach their keepers at once, not at the recheck: test_claim_wakes.)"""
    options = FleetOptions(
        workers=40, tasks=10, interval=0.05, idle=0.5, wait=5.0, database_url=database_url,
        contexts=2,
    )  # fmt: skip
    report = await run_fleet(options)
    assert report.safe, (report.error_samples, report.superseded)
    assert (report.created, report.started, report.completed) == (10, 10, 10)


def test_fleet_from_the_command_line_as_json():
    done = subprocess.run(
        [*BLOOM, "bench", "--fleet", "8", "--tasks", "3", "--interval", "0", "--idle", "0.5",
         "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["mode"], report["storage"], report["safe"]) == ("fleet", "sqlite", True)
    assert (report["created"], report["started"], report["granted_twice"]) == (3, 3, 0)
    assert report["superseded"] == 0
    assert len(report["slowest"]) == 3
    assert report["create_to_start"]["count"] == 3
    refused = subprocess.run(
        [*BLOOM, "bench", "--fleet", "8", "--soak", "5"], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert "--fleet starts a server of its own" in refused.stderr
