"""`bloom bench --graph`: fan-ins made in one batch and drained by simulated workers; the
dependent's release latency measured, each dependency completed once and each dependent granted
once, on both databases; and its command line."""

import json
import subprocess
import sys

from bloom.bench.graph import GraphOptions, run_graph

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_fan_ins_are_drained_and_each_dependent_granted_once(database_url: str):
    options = GraphOptions(dependencies=60, rounds=3, workers=4, database_url=database_url)
    report = await run_graph(options)
    assert report.errors == 0, report.error_samples
    assert (report.rounds, report.completed, report.completed_twice) == (3, 180, 0)
    assert (report.dependents_granted, report.dependents_granted_twice) == (3, 0)
    assert report.safe
    assert report.release.count == 3
    release, drain = report.release.p50_ms, report.drain.p50_ms
    assert release is not None
    assert drain is not None
    assert 0 < release < drain


def test_graph_from_the_command_line_as_json():
    done = subprocess.run(
        [*BLOOM, "bench", "--graph", "20", "--rounds", "2", "--workers", "3", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["mode"], report["storage"], report["safe"]) == ("graph", "sqlite", True)
    assert (report["completed"], report["dependents_granted"]) == (40, 2)
    refused = subprocess.run(
        [*BLOOM, "bench", "--graph", "20", "--drain", "40"], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert "--graph starts a server of its own" in refused.stderr
    too_many = subprocess.run([*BLOOM, "bench", "--graph", "1000"], capture_output=True, text=True)
    assert too_many.returncode == 2
