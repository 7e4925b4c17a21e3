"""`/metrics` on the runtime and on Membridge, read with prometheus-client's own parser: gauges
equal to what the database holds, HTTP metrics labelled by route template however many ids are
asked for, and who may scrape."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from bloom.domain.identity import Role
from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.access import route_table
from bloom.runtime.app import create_app
from bloom.runtime.container import Container
from bloom.runtime.storage.tables import llm_tasks, workers
from tests.support.api import API, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe
from tests.support.membridge import ADMIN_HEADER, membridge_settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, sorted labels) → value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@asynccontextmanager
async def serving(app: FastAPI, base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as http:
            yield http


async def test_runtime_gauges_equal_the_database(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    await register_worker(client, "w1", slots=3)
    await register_worker(client, "w2", slots=2)
    tasks = [await create_task(client, context_id=f"c{i}") for i in range(5)]
    for task in tasks[:3]:
        assert (await client.post(f"{API}/llm-tasks/{task['id']}/lease")).status_code == 201
    await client.post(f"{API}/llm-tasks/{tasks[0]['id']}/complete", json=success())
    await client.post(f"{API}/llm-tasks/{tasks[4]['id']}/cancel")

    scrape = await client.get("/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = samples(scrape.text)
    by_status = {
        row["status"]: row["n"]
        for row in probe.rows(
            select(llm_tasks.c.status, func.count().label("n")).group_by(llm_tasks.c.status)
        )
    }
    for status in ("queued", "leased", "running", "completed", "failed", "dead", "cancelled"):
        assert got[("bloom_tasks", (("status", status),))] == by_status.get(status, 0)
    assert by_status == {"queued": 1, "leased": 2, "completed": 1, "cancelled": 1}
    online = probe.count(workers, workers.c.status == "online")
    assert got[("bloom_workers", (("status", "online"),))] == online == 2
    assert got[("bloom_leases_active", ())] == 2
    assert got[("bloom_worker_free_slots", ())] == 5 - 2


async def test_http_metrics_keep_to_route_templates(client: httpx.AsyncClient) -> None:
    for i in range(1000):
        await client.get(f"{API}/llm-tasks/no-such-task-{i}")
    await client.get("/no/such/path")
    got = samples((await client.get("/metrics")).text)
    routes = {
        dict(labels)["route"]
        for (name, labels) in got
        if name == "bloom_http_requests_total" and dict(labels)["server"] == "runtime"
    }
    assert f"{API}/llm-tasks/{{task_id}}" in routes
    assert "unmatched" in routes
    templates = {path for _, path in route_table(client.app)}  # type: ignore[attr-defined]
    assert routes <= templates | {"unmatched"}
    key = (
        "bloom_http_requests_total",
        (
            ("method", "GET"),
            ("route", f"{API}/llm-tasks/{{task_id}}"),
            ("server", "runtime"),
            ("status", "404"),
        ),
    )
    assert got[key] >= 1000


async def test_who_may_scrape_the_runtime(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, api_key="admin-key-1234567890")
    app = create_app(settings, clock=FakeClock())
    async with serving(app, "http://runtime") as http:
        container: Container = app.state.container
        viewer = (await container.credentials.create_key("v", Role.VIEWER)).secret
        worker = (await container.credentials.create_key("w", Role.WORKER, "w1")).secret
        assert (await http.get("/metrics")).status_code == 401
        assert (
            await http.get("/metrics", headers={"X-Runtime-API-Key": worker})
        ).status_code == 403
        assert (
            await http.get("/metrics", headers={"X-Runtime-API-Key": viewer})
        ).status_code == 200
        admin = {"X-Runtime-API-Key": "admin-key-1234567890"}
        assert (await http.get("/metrics", headers=admin)).status_code == 200
    public = settings.model_copy(update={"metrics_public": True})
    async with serving(create_app(public, clock=FakeClock()), "http://runtime") as http:
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get(f"{API}/stats")).status_code == 401


async def test_membridge_metrics(membridge_db_url: str, tmp_path: Path) -> None:
    settings = membridge_settings(membridge_db_url, tmp_path, admin_key="mb-key-123")
    admin = {ADMIN_HEADER: "mb-key-123"}
    async with serving(create_membridge(settings), "http://membridge") as http:
        for name in ("a1", "a2"):
            response = await http.post(
                "/agents", json={"name": name, "url": "http://x"}, headers=admin
            )
            assert response.status_code in (200, 201), response.text
        await http.post("/projects", json={"name": "p1"}, headers=admin)
        assert (await http.get("/metrics")).status_code == 401
        got = samples((await http.get("/metrics", headers=admin)).text)
        assert sum(v for (n, _), v in got.items() if n == "bloom_membridge_agents") == 2
        assert got[("bloom_membridge_projects", ())] == 1
        assert got[("bloom_membridge_nodes", ())] == 0
        assert any(
            n == "bloom_http_requests_total" and dict(labels).get("route") == "/agents"
            for (n, labels) in got
        )
    public = settings.model_copy(update={"metrics_public": True})
    async with serving(create_membridge(public), "http://membridge") as http:
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get("/agents")).status_code == 401


async def test_outcomes_waits_claims_and_expiries_are_counted(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    def read() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return samples(generate_latest().decode())

    before = read()
    await register_worker(client, "w1", slots=3)
    done, lost, retried = [await create_task(client, context_id=f"c{i}") for i in range(3)]
    clock.advance(2)  # they wait 2 s in the queue
    grants = [
        (await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})).json()
        for _ in range(3)
    ]
    assert (
        await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0})
    ).status_code == 204
    lease_of = {grant["task"]["id"]: grant["lease"]["id"] for grant in grants}
    clock.advance(3)  # each attempt runs 3 s
    costs = {"cost_usd": 0.25, "input_tokens": 100, "output_tokens": 7, "duration_ms": 5}
    for task, body in ((done, success(metrics=costs)), (retried, failure(metrics=costs))):
        answer = await client.post(
            f"{API}/llm-tasks/{task['id']}/complete",
            json=body | {"lease_id": lease_of[task["id"]], "worker_id": "w1"},
        )
        assert answer.status_code == 200, answer.text
    clock.advance(600)  # the third's lease lapses
    container: Container = client.app.state.container  # type: ignore[attr-defined]
    assert await container.reaper.reap_once() == 1
    after = read()

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("bloom_task_outcomes_total", status="completed", cli="claude") == 1
    assert delta("bloom_task_outcomes_total", status="queued", cli="claude") == 1  # a retry
    assert delta("bloom_task_queue_wait_seconds_count") == 3
    assert delta("bloom_task_queue_wait_seconds_sum") == pytest.approx(6)
    assert delta("bloom_task_run_seconds_count") == 2
    assert delta("bloom_task_run_seconds_sum") == pytest.approx(6)
    assert delta("bloom_claim_seconds_count", result="granted") == 3
    assert delta("bloom_claim_seconds_count", result="empty") == 1
    assert delta("bloom_leases_expired_total") == 1
    assert delta("bloom_reaper_actions_total", action="requeued") == 1
    cost = delta("bloom_usage_cost_usd_total", project="default", cli="claude")
    assert cost == pytest.approx(0.5)
    assert delta("bloom_usage_tokens_total", project="default", cli="claude", kind="input") == 200
    assert delta("bloom_usage_tokens_total", project="default", cli="claude", kind="output") == 14
    assert lost["id"] in lease_of
