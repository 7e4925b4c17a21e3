"""`bloom bench --graph`: fan-ins, and a layered graph of 1,000 tasks, made in one batch and
drained by simulated workers; the dependents' release latency measured, each task completed
once and each dependent released and granted once, never before its dependencies, and the
overview's counts exact, on both databases; and its command line."""

import json
import subprocess
import sys

from bloom.bench.graph import GraphOptions, Shape, run_graph

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_fan_ins_are_drained_and_each_dependent_granted_once(database_url: str):
    options = GraphOptions(size=60, rounds=3, workers=4, database_url=database_url)
    report = await run_graph(options)
    assert report.errors == 0, report.error_samples
    assert (report.rounds, report.completed, report.completed_twice) == (3, 183, 0)
    assert (report.dependents, report.dependents_granted, report.dependents_granted_twice) == (
        3,
        3,
        0,
    )
    assert (report.released, report.released_twice, report.granted_early) == (3, 0, 0)
    assert report.counted == {"completed": 183}
    assert report.overview_counts == report.counted
    assert report.safe
    assert report.release.count == 3
    release, drain = report.release.p50_ms, report.drain.p50_ms
    assert release is not None
    assert drain is not None
    assert 0 < release < drain


async def test_a_layered_graph_of_1000_tasks_is_drained_each_dependent_released_once(
    database_url: str,
):
    options = GraphOptions(
        size=1000, rounds=1, workers=8, database_url=database_url, shape=Shape.LAYERS, width=100
    )
    report = await run_graph(options)
    assert report.errors == 0, report.error_samples
    assert (report.tasks, report.completed, report.completed_twice) == (1000, 1000, 0)
    granted = (report.dependents_granted, report.dependents_granted_twice, report.granted_early)
    assert (report.dependents, granted) == (900, (900, 0, 0))
    assert (report.released, report.released_twice) == (900, 0)
    assert report.counted == {"completed": 1000}
    assert report.overview_counts == report.counted
    assert report.safe
    assert report.release.count == 900
    assert report.drain.count == 1


def test_graph_from_the_command_line_as_json():
    done = subprocess.run(
        [*BLOOM, "bench", "--graph", "20", "--rounds", "2", "--workers", "3", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["mode"], report["storage"], report["safe"]) == ("graph", "sqlite", True)
    assert (report["completed"], report["dependents_granted"]) == (42, 2)
    refused = subprocess.run(
        [*BLOOM, "bench", "--graph", "20", "--drain", "40"], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert "--graph starts a server of its own" in refused.stderr
    too_many = subprocess.run([*BLOOM, "bench", "--graph", "1000"], capture_output=True, text=True)
    assert too_many.returncode == 2
    layered = subprocess.run(
        [*BLOOM, "bench", "--graph", "30", "--shape", "layers", "--width", "10", "--rounds", "1",
         "--workers", "3", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert layered.returncode == 0, layered.stderr
    report = json.loads(layered.stdout)
    assert (report["options"]["shape"], report["options"]["width"], report["safe"]) == (
        "layers",
        10,
        True,
    )
    assert (report["tasks"], report["completed"], report["dependents"]) == (30, 30, 20)
    assert (report["dependents_granted"], report["released"], report["granted_early"]) == (
        20,
        20,
        0,
    )
    assert report["counts"] == {"overview": {"completed": 30}, "counted": {"completed": 30}}
    for alone, refusal in (
        (["--shape", "layers"], "--shape and --width go with --graph"),
        (["--graph", "30", "--width", "10"], "--width goes with --shape layers"),
        (["--graph", "30", "--shape", "layers", "--width", "30"], "--width takes 1 to"),
    ):
        refused = subprocess.run([*BLOOM, "bench", *alone], capture_output=True, text=True)
        assert refused.returncode == 2, refused.stderr
        assert refusal in refused.stderr
