"""`bloom bench --soak`: a paced load against a server of its own, sampled as it runs, on both
databases; its command line. (Its verdict: tests/unit/test_soak_trends.py.)"""

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, func, select

from bloom.bench.soak import Sample, SoakOptions, run_soak
from bloom.db.database import resolve_database
from bloom.runtime.storage.tables import llm_tasks

BLOOM = [sys.executable, "-m", "bloom.cli.main"]


async def test_soak_paces_the_fleet_and_samples_server_and_database(
    database_url: str, tmp_path: Path
):
    """3 s at 20 cycles/s, sampled every second: about 60 cycles (paced, not as many as the
    server could take), no errors, a sample at the start, each second and the end, each with the
    server's memory and descriptors and the database's tables; every task it made is completed."""
    options = SoakOptions(
        duration=3.0, rate=20.0, workers=4, sample_every=1.0, database_url=database_url
    )
    seen: list[Sample] = []
    report = await run_soak(options, seen.append)

    assert report.errors == 0, report.error_samples
    assert seen == report.samples
    assert len(report.samples) >= 4
    assert [s.at_sec for s in report.samples] == sorted(s.at_sec for s in report.samples)
    final = report.samples[-1]
    assert 40 <= final.cycles <= 62  # the pace holds: 20/s for 3 s, a slow start allowed
    for sample in report.samples:
        assert sample.rss_kb > 10_000
        assert sample.fds > 3
        names = {t.name for t in sample.database.tables}
        assert {"llm_tasks", "leases", "audit_logs", "workers"} <= names
        assert sample.database.bytes > 0
    tasks = next(t for t in final.database.tables if t.name == "llm_tasks")
    if database_url.startswith("postgresql"):  # its statistics views lag: counts are estimates
        assert (final.database.connections or 0) >= 1
        assert None not in (tasks.dead_rows, tasks.bytes, tasks.vacuums)
    else:
        assert tasks.live_rows >= final.cycles
        assert final.database.connections is None
        assert final.database.free_bytes is not None

    engine = create_engine(resolve_database(database_url, tmp_path).sync_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(llm_tasks.c.status, func.count()).group_by(llm_tasks.c.status)
            )
            by_status = {status: count for status, count in rows}
    finally:
        engine.dispose()
    assert set(by_status) == {"completed"}  # the drain left nothing queued or leased

    figures = {t.figure for t in report.trends()}
    assert {"server RSS (MiB)", "server descriptors"} <= figures
    if database_url.startswith("postgresql"):
        assert "database connections" in figures


def test_cli_soak_prints_samples_then_one_json_object(tmp_path: Path):
    """`--soak 2 --json`: a progress line per sample on standard error, one JSON object with the
    samples and trends on standard output, nothing left in the working directory."""
    done = subprocess.run(
        [
            *BLOOM,
            "bench",
            "--soak",
            "2",
            "--rate",
            "10",
            "--workers",
            "2",
            *("--sample-every", "1"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["mode"], out["storage"], out["errors"]) == ("soak", "sqlite", 0)
    assert len(out["samples"]) >= 3
    assert " cycles · 0 errors · RSS " in done.stderr
    assert any(t["figure"] == "server RSS (MiB)" for t in out["trends"])
    assert list(tmp_path.iterdir()) == []


def test_cli_soak_refuses_a_url():
    """Soak mode reads its server's memory, so it starts its own."""
    done = subprocess.run(
        [*BLOOM, "bench", "--soak", "10", "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--soak" in done.stderr
