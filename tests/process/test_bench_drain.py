"""`bloom bench --drain`: a full queue emptied with one call per task; what it measures, on both
databases, and its command line."""

import json
import subprocess
import sys

from bloom.bench.drain import BATCH, DrainOptions, run_drain

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_drain_completes_every_task_once_with_one_call_each(database_url: str):
    tasks, workers = BATCH + 150, 6
    report = await run_drain(DrainOptions(tasks=tasks, workers=workers, database_url=database_url))
    assert report.errors == 0, report.error_samples
    assert (report.queued, report.completed, report.completed_twice) == (tasks, tasks, 0)
    assert report.safe
    assert report.drained_per_sec > 0
    assert report.queued_per_sec > 0
    assert report.call.count == tasks  # the last complete of each worker answers no next task
    assert report.server_cpu_ms_per_task is not None
    assert report.server_cpu_ms_per_task > 0
    # registration, 3 batches, a first claim each, one complete a task
    assert report.requests == workers + 3 + workers + tasks


async def test_drain_in_batches_completes_every_task_once_with_fewer_calls(database_url: str):
    tasks, workers = BATCH + 150, 6
    report = await run_drain(
        DrainOptions(tasks=tasks, workers=workers, database_url=database_url, batch=4)
    )
    assert report.errors == 0, report.error_samples
    assert (report.queued, report.completed, report.completed_twice) == (tasks, tasks, 0)
    assert report.safe
    # each call but a worker's first ends up to four attempts and claims up to four
    assert tasks / 4 <= report.call.count < tasks / 2


def test_drain_from_the_command_line_as_json():
    done = subprocess.run(
        [*BLOOM, "bench", "--drain", "40", "--workers", "3", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["mode"], report["storage"], report["safe"]) == ("drain", "sqlite", True)
    assert (report["queued"], report["completed"], report["completed_twice"]) == (40, 40, 0)
    refused = subprocess.run(
        [*BLOOM, "bench", "--drain", "40", "--url", "http://127.0.0.1:1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--drain starts a server of its own" in refused.stderr
    alone = subprocess.run([*BLOOM, "bench", "--batch", "4"], capture_output=True, text=True)
    assert alone.returncode == 2
    assert "--batch goes with --drain" in alone.stderr
