"""The bench's figures as one JSON object, or as rich tables for people."""

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from bloom.bench.cycle import CycleReport
from bloom.bench.depth import DepthReport
from bloom.bench.runner import BenchResult
from bloom.bench.stats import Latency, ms_text
from bloom.bench.tables import print_errors


def as_json(result: BenchResult) -> dict[str, Any]:
    """One machine-readable object: mode, the mode's figures, and the run's context."""
    out: dict[str, Any] = {"context": asdict(result.context)}
    if result.cycle is not None:
        out |= {"mode": "cycle"} | _cycle_json(result.cycle)
    if result.depth is not None:
        out |= {"mode": "depth"} | _depth_json(result.depth)
    return out


def _cycle_json(report: CycleReport) -> dict[str, Any]:
    return {
        "workers": report.workers,
        "warmup_sec": report.warmup_sec,
        "duration_sec": report.duration_sec,
        "cycles": report.cycles,
        "cycles_per_sec": report.cycles_per_sec,
        "claim_latency": report.claim.as_dict(),
        "create_to_claim_latency": report.create_to_claim.as_dict(),
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
        "client_cpu_ms_per_request": report.client_cpu_ms_per_request,
        "server_cpu_ms_per_cycle": report.server_cpu_ms_per_cycle,
        "database_cpu_ms_per_cycle": report.database_cpu_ms_per_cycle,
        "machine_cpu_ms_per_cycle": report.machine_cpu_ms_per_cycle,
    }


def _depth_json(report: DepthReport) -> dict[str, Any]:
    return {
        "workers": report.workers,
        "depths": [
            {
                "depth": r.depth,
                "inserted": r.inserted,
                "fill_sec": r.fill_sec,
                "claim_latency": r.claim.as_dict(),
                "empty_claims": r.empty_claims,
                "p50_ratio": r.p50_ratio,
            }
            for r in report.results
        ],
        "requests": report.requests,
        "errors": report.errors,
        "error_samples": report.error_samples,
    }


def render(result: BenchResult, console: Console) -> None:
    """Print the figures, the errors, then the context they were measured in."""
    if result.cycle is not None:
        _render_cycle(result.cycle, console)
        errors, samples = result.cycle.errors, result.cycle.error_samples
    elif result.depth is not None:
        _render_depth(result.depth, console)
        errors, samples = result.depth.errors, result.depth.error_samples
    print_errors(console, errors, samples, ok=errors == 0)
    ctx = result.context
    processes = "?" if ctx.server_processes is None else str(ctx.server_processes)
    console.print(
        f"[dim]storage {ctx.storage} · server processes {processes} · cpus {ctx.cpu_count} · "
        f"Python {ctx.python} · bloom {ctx.bloom_version} · {ctx.platform} · {ctx.server}[/]"
    )


def _render_cycle(report: CycleReport, console: Console) -> None:
    table = Table(title=f"bloom bench: {report.workers} workers, {report.duration_sec:g} s")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("full cycles/s", f"[bold]{report.cycles_per_sec:.1f}[/]")
    table.add_row("cycles", str(report.cycles))
    _latency_rows(table, "claim", report.claim)
    _latency_rows(table, "create → claim", report.create_to_claim)
    table.add_row("requests sent (whole run)", str(report.requests))
    table.add_row("client CPU / request", ms_text(report.client_cpu_ms_per_request, 2))
    table.add_row("server CPU / cycle", ms_text(report.server_cpu_ms_per_cycle, 2))
    table.add_row("database CPU / cycle", ms_text(report.database_cpu_ms_per_cycle, 2))
    table.add_row("machine CPU / cycle", ms_text(report.machine_cpu_ms_per_cycle, 2))
    console.print(table)


def _latency_rows(table: Table, name: str, latency: Latency) -> None:
    table.add_row(f"{name} p50", ms_text(latency.p50_ms, 2))
    table.add_row(f"{name} p99", ms_text(latency.p99_ms, 2))


def _render_depth(report: DepthReport, console: Console) -> None:
    table = Table(title=f"bloom bench --depth: claim latency, {report.workers} workers")
    for name in ("queued", "claims", "claim p50", "claim p99", "p50 ÷ first", "fill"):
        table.add_column(name, justify="right")
    for r in report.results:
        ratio = "-" if r.p50_ratio is None else f"{r.p50_ratio:.2f}x"
        claims = f"{r.claim.count}" + (f" ({r.empty_claims} empty)" if r.empty_claims else "")
        table.add_row(
            f"{r.depth:,}",
            claims,
            ms_text(r.claim.p50_ms, 2),
            ms_text(r.claim.p99_ms, 2),
            ratio,
            f"{r.inserted:,} rows in {r.fill_sec:.1f} s",
        )
    console.print(table)
