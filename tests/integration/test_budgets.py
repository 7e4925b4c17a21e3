"""Budgets per project (issue 20 part 3) on both databases: a spent project's queued tasks are
passed over by claims and refused by lease, visibly held and never failed; a raise, a removal
or the window's reset releases them; warnings at 80 %; and under concurrent claims and
completes, spend overshoots by at most the tasks already running, with nothing lost."""

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API, create_task, register_worker
from tests.support.clock import FakeClock
from tests.support.databases import make_settings

NOV_10_NOON = int(datetime(2026, 11, 10, 12, tzinfo=UTC).timestamp() * 1000)
NOV_11 = int(datetime(2026, 11, 11, tzinfo=UTC).timestamp() * 1000)
DEC_1 = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
DAY_SEC = 86_400


async def put_budget(client: httpx.AsyncClient, project: str, **limits: Any) -> dict[str, Any]:
    response = await client.put(f"{API}/budgets/{project}", json=limits)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def claim_task(client: httpx.AsyncClient, worker: str) -> dict[str, Any] | None:
    response = await client.post(f"{API}/workers/{worker}/claim", json={"wait_seconds": 0})
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


async def complete(client: httpx.AsyncClient, grant: dict[str, Any], cost: float) -> None:
    body = {
        "status": "success",
        "output": "ok",
        "metrics": {"duration_ms": 5, "cost_usd": cost},
        "lease_id": grant["lease"]["id"],
    }
    response = await client.post(f"{API}/llm-tasks/{grant['task']['id']}/complete", json=body)
    assert response.status_code == 200, response.text


async def run_next(client: httpx.AsyncClient, worker: str, cost: float) -> str | None:
    """Claim the next task for `worker` and complete it at `cost`; its id (None: no task)."""
    grant = await claim_task(client, worker)
    if grant is None:
        return None
    await complete(client, grant, cost)
    return str(grant["task"]["id"])


async def audit_actions(client: httpx.AsyncClient) -> list[str]:
    entries = (await client.get(f"{API}/audit", params={"limit": 1000})).json()
    return [e["action"] for e in entries if e["action"].startswith("budget_")][::-1]


def marks() -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["project"], s.labels["window"], s.labels["mark"]): s.value
        for family in text_string_to_metric_families(generate_latest().decode())
        for s in family.samples
        if s.name == "bloom_budget_marks_total"
    }


async def test_a_spent_project_waits_visibly_and_a_raise_releases_it(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    clock.now = NOV_10_NOON
    before = marks()
    await register_worker(client, "w1")
    alpha = [await create_task(client, agent_slug="alpha") for _ in range(3)]
    beta = await create_task(client, agent_slug="beta")
    view = await put_budget(client, "alpha", daily_usd=1.0)
    assert view | {"updated_at": 0, "updated_by": "caller"} == {
        "project": "alpha",
        "daily_usd": 1.0,
        "monthly_usd": None,
        "spent_today_usd": 0.0,
        "spent_month_usd": 0.0,
        "held_until": None,
        "daily_resets_at": NOV_11,
        "monthly_resets_at": DEC_1,
        "updated_at": 0,
        "updated_by": "caller",
    }
    assert view["updated_by"]  # who set it (here the open dev mode's caller: its address)
    assert await run_next(client, "w1", 0.85) == alpha[0]["id"]  # 85 %: a warning
    assert await run_next(client, "w1", 0.30) == alpha[1]["id"]  # 115 %: spent
    assert await audit_actions(client) == ["budget_set", "budget_warning", "budget_exhausted"]
    after = marks()
    for mark in ("warning", "exhausted"):
        key = ("alpha", "daily", mark)
        assert after.get(key, 0) - before.get(key, 0) == 1
    # alpha's last task is passed over, beta's is not; then nothing is left to claim
    assert await run_next(client, "w1", 0.01) == beta["id"]
    assert await claim_task(client, "w1") is None
    held = (await client.get(f"{API}/llm-tasks/{alpha[2]['id']}")).json()
    assert held["status"] == "queued"
    assert held["hold"] == {"project": "alpha", "until": NOV_11, "reason": "budget_exhausted"}
    listed = {t["id"]: t for t in (await client.get(f"{API}/llm-tasks")).json()}
    assert listed[alpha[2]["id"]]["hold"]["until"] == NOV_11
    assert "hold" not in listed[beta["id"]]
    refused = await client.post(f"{API}/llm-tasks/{alpha[2]['id']}/lease")
    assert refused.status_code == 409
    assert refused.json() == {
        "error": "Project 'alpha' has spent its budget: its tasks wait until 2026-11-11 00:00 UTC"
    }
    view = (await client.get(f"{API}/budgets/alpha")).json()
    assert (view["spent_today_usd"], view["held_until"]) == (pytest.approx(1.15), NOV_11)
    # a raise releases it at once
    raised = await put_budget(client, "alpha", daily_usd=5.0)
    assert raised["held_until"] is None
    assert "hold" not in (await client.get(f"{API}/llm-tasks/{alpha[2]['id']}")).json()
    assert await run_next(client, "w1", 0.1) == alpha[2]["id"]
    assert await audit_actions(client) == [
        "budget_set",
        "budget_warning",
        "budget_exhausted",
        "budget_set",
    ]


async def test_the_windows_reset_releases_and_the_month_counts_every_day(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    clock.now = NOV_10_NOON
    await register_worker(client, "w1")
    await put_budget(client, "alpha", daily_usd=1.0, monthly_usd=1.5)
    tasks = [await create_task(client, agent_slug="alpha") for _ in range(4)]
    assert await run_next(client, "w1", 1.0) == tasks[0]["id"]
    assert await claim_task(client, "w1") is None  # the day is spent
    clock.advance(DAY_SEC)  # the next day: its own budget
    assert await run_next(client, "w1", 0.6) == tasks[1]["id"]
    # the month is spent (1.6 of 1.5): held until December, though the day has budget left
    view = (await client.get(f"{API}/budgets/alpha")).json()
    assert (view["spent_today_usd"], view["spent_month_usd"]) == (
        pytest.approx(0.6),
        pytest.approx(1.6),
    )
    assert view["held_until"] == DEC_1
    clock.now = DEC_1 - 1
    assert await claim_task(client, "w1") is None
    clock.now = DEC_1
    assert await run_next(client, "w1", 0.1) == tasks[2]["id"]


async def test_a_budget_of_zero_holds_at_once_and_removing_it_releases(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    clock.now = NOV_10_NOON
    await register_worker(client, "w1")
    task = await create_task(client, agent_slug="frozen")
    stopped = await put_budget(client, "frozen", daily_usd=0)
    assert stopped["held_until"] == NOV_11
    assert await claim_task(client, "w1") is None
    listed = (await client.get(f"{API}/budgets")).json()
    assert [b["project"] for b in listed] == ["frozen"]
    removed = await client.delete(f"{API}/budgets/frozen")
    assert removed.json() == {"removed": True, "project": "frozen"}
    assert await run_next(client, "w1", 0.5) == task["id"]
    assert (await audit_actions(client)) == ["budget_set", "budget_removed"]


async def test_bad_budgets_are_400_and_unknown_ones_404(client: httpx.AsyncClient) -> None:
    for body in ({}, {"daily_usd": -1}, {"monthly_usd": 2e6}, {"daily_usd": "5"}, {"x": 1}):
        response = await client.put(f"{API}/budgets/p", json=body)
        assert response.status_code == 400, (body, response.text)
        assert "error" in response.json()
    for method in ("GET", "DELETE"):
        missing = await client.request(method, f"{API}/budgets/nope")
        assert missing.status_code == 404
        assert missing.json() == {"error": "No budget for project 'nope'"}


async def test_concurrent_claims_and_completes_overshoot_by_at_most_the_running_tasks(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """Eight workers drain one project at $0.30 a task against a $2 daily budget, claiming and
    completing concurrently: each task runs at most once, the spend stops within one task per
    worker of the limit, the rest stay queued, and the budget is announced spent once."""
    clock.now = NOV_10_NOON
    workers, cost, limit = 8, 0.3, 2.0
    for n in range(workers):
        await register_worker(client, f"w{n}")
    queued = {(await create_task(client, agent_slug="busy"))["id"] for _ in range(30)}
    await put_budget(client, "busy", daily_usd=limit)

    async def drain(worker: str) -> list[str]:
        done = []
        while (task_id := await run_next(client, worker, cost)) is not None:
            done.append(task_id)
        return done

    ran = [
        task_id
        for done in await asyncio.gather(*map(drain, [f"w{n}" for n in range(workers)]))
        for task_id in done
    ]
    assert len(ran) == len(set(ran))  # nothing ran twice
    spent = (await client.get(f"{API}/budgets/busy")).json()["spent_today_usd"]
    assert spent == pytest.approx(len(ran) * cost)  # every charge counted, none lost
    assert limit <= spent < limit + workers * cost
    tasks = {t["id"]: t for t in (await client.get(f"{API}/llm-tasks")).json()}
    left = queued - set(ran)
    assert left
    assert all(tasks[t]["status"] == "queued" and tasks[t]["hold"] for t in left)
    assert all(tasks[t]["status"] == "completed" for t in ran)
    actions = await audit_actions(client)
    assert actions.count("budget_exhausted") == 1
    assert actions.count("budget_warning") == 1


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    """Claims that never look again by themselves: only a wake-up can hand them a task."""
    return make_settings(database_url, tmp_path, claim_recheck_sec=3600.0)


async def test_a_waiting_claim_is_woken_when_the_hold_ends(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    clock.now = NOV_10_NOON
    await register_worker(client, "w1")
    task = await create_task(client, agent_slug="paused")
    await put_budget(client, "paused", daily_usd=0)  # held until midnight
    # The hold ends in a moment: written as a complete that spent the budget would.
    container = client.app.state.container  # type: ignore[attr-defined]
    async with container.db.write() as tx:
        held = await tx.budgets.get("paused")
        await tx.budgets.put(replace(held, held_until=clock.now + 300))
    container.budgets.releases.changed()

    async def midnight_soon() -> None:
        await asyncio.sleep(0.3)
        clock.advance(1)

    ticking = asyncio.create_task(midnight_soon())
    started = time.monotonic()
    claimed = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 10})
    await ticking
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["task"]["id"] == task["id"]
    # woken, not answered by the long-poll's last look at its end (which would also find it)
    assert time.monotonic() - started < 8
