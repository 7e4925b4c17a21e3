"""`bloom bench --worker-overhead`: a real worker and the real Claude CLI against the echo model and
a server of the bench's own; what it reports (its shape and sanity, not its timings), and its
command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

from bloom.bench.worker_overhead import OverheadOptions, run_worker_overhead

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_each_task_is_timed_from_the_runtime_and_the_cli_alone(claude: Path):
    """3 counted tasks after 1 untimed: each its span, its CLI run as the worker timed it (inside
    the span), the difference, and the CLI run by the bench; no error."""
    report = await run_worker_overhead(OverheadOptions(3, warmup=1, claude_bin=str(claude)))
    assert report.errors == 0, report.error_samples
    figures = (
        report.span,
        report.cli_in_worker,
        report.overhead,
        report.cli_alone,
        report.beyond_cli_alone,
    )
    assert [latency.count for latency in figures] == [3] * 5
    assert 0 < report.cli_in_worker.p50_ms <= report.span.p50_ms  # type: ignore[operator]
    assert 0 < report.overhead.p50_ms < report.span.p50_ms  # type: ignore[operator]
    assert report.cli_alone.p50_ms is not None
    assert report.cli_alone.p50_ms > 0
    assert report.claude == str(claude.resolve())
    assert report.claude_version[0].isdigit()
    assert report.requests == 4 * 3  # per task: create, its events followed, its lease read


def test_worker_overhead_from_the_command_line_as_json(claude: Path):
    env = os.environ | {"BLOOM_CLAUDE_BIN": str(claude)}
    done = subprocess.run(
        [*BLOOM, "bench", "--worker-overhead", "1", "--json"],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["mode"], report["storage"], report["errors"]) == ("worker-overhead", "sqlite", 0)
    for figure in ("span", "cli_in_worker", "overhead", "cli_alone", "beyond_cli_alone"):
        assert report[figure]["count"] == 1
        assert set(report[figure]) == {"count", "p50_ms", "p99_ms", "mean_ms"}
    refused = subprocess.run(
        [*BLOOM, "bench", "--worker-overhead", "1", "--fleet", "8"], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert "--worker-overhead starts a server of its own" in refused.stderr
