"""`/metrics` of `bloom runtime serve --workers 2`: once both processes have answered requests,
whichever process answers a scrape, the counters are every process's together, and the gauges
the database's."""

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import RuntimeProcess

REQUESTS = 20


def processes_that_created_tasks(metrics_dir: Path) -> set[str]:
    """The server processes whose own counter file holds task creations."""
    return {
        path.stem
        for path in metrics_dir.glob("counter_*.db")
        for key, count, *_ in MmapedDict.read_all_values_from_file(str(path))  # type: ignore[no-untyped-call]
        if "/api/runtime/llm-tasks" in key and count > 0
    }


def value(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


async def spread_load(url: str) -> None:
    """Concurrent requests on connections of their own, so both processes answer some."""
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits) as http:
        body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
        answers = await asyncio.gather(
            *(http.post("/api/runtime/llm-tasks", json=body) for _ in range(REQUESTS))
        )
    assert {answer.status_code for answer in answers} == {201}


def scraped(url: str) -> tuple[float, float]:
    """The task creations counted, and the queue's depth, in one scrape on a new connection
    (whichever process takes it)."""
    scrape = httpx.get(f"{url}/metrics", headers={"Connection": "close"}).text
    created = value(scrape, "bloom_http_requests_total", route="/api/runtime/llm-tasks")
    return created, value(scrape, "bloom_tasks", status="queued")


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_counters_add_up_across_server_processes(database_url: str, tmp_path: Path) -> None:
    runtime = RuntimeProcess(database_url, tmp_path)
    runtime.start("--workers", "2")
    metrics_dir = tmp_path / f"metrics-{runtime.port}"
    try:
        rounds, deadline = 0, time.monotonic() + 90  # the second may still be starting
        while len(processes_that_created_tasks(metrics_dir)) < 2:
            assert time.monotonic() < deadline, "the second server process never answered"
            asyncio.run(spread_load(runtime.url))
            rounds += 1
            time.sleep(0.5)
        # a request is counted as its answer goes out: on a loaded machine the last ones may
        # land a moment after the client has them, so the scrapes start once one has them all
        while scraped(runtime.url)[0] != REQUESTS * rounds:
            assert time.monotonic() < deadline, scraped(runtime.url)
            time.sleep(0.2)
        counts, queued = set(), set()
        for _ in range(10):
            count, depth = scraped(runtime.url)
            counts.add(count)
            queued.add(depth)
    finally:
        runtime.stop()
    assert counts == {REQUESTS * rounds}
    assert queued == {REQUESTS * rounds}
