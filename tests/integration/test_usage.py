"""Usage as data (issue 20 part 2): results' cost, tokens and turns summed by project, context,
agent, worker, model, agent CLI, day and hour over a window, equal to the figures the workers
reported, on both databases."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.support.api import API, claim, create_task, register_worker
from tests.support.clock import FakeClock

DAY = 86_400
SUMMED = ["cost_usd", "input_tokens", "output_tokens", "tokens_used", "num_turns", "duration_ms"]


@dataclass
class Done:
    """One attempt as the test reported it."""

    task_id: str
    project: str
    context: str
    worker: str
    cli: str
    at: int
    status: str
    metrics: dict[str, Any]


async def attempt(
    client: httpx.AsyncClient,
    clock: FakeClock,
    task: dict[str, Any],
    worker: str,
    status: str,
    metrics: dict[str, Any],
) -> Done:
    claimed = await claim(client, worker)
    assert claimed is not None
    assert claimed["task"]["id"] == task["id"]
    body: dict[str, Any] = {
        "status": status,
        "metrics": metrics,
        "lease_id": claimed["lease"]["id"],
        "output" if status == "success" else "error_message": "x",
    }
    done = await client.post(f"{API}/llm-tasks/{task['id']}/complete", json=body)
    assert done.status_code == 200, done.text
    return Done(
        task["id"],
        task["agent_slug"],
        task["context_id"],
        worker,
        task["cli"],
        clock.now,
        status,
        metrics,
    )


def usage_of(n: int) -> dict[str, Any]:
    """Distinct figures per attempt, some of them missing, so a wrong sum shows."""
    metrics: dict[str, Any] = {"duration_ms": 100 + n, "tokens_used": None}
    if n % 4 != 3:  # every fourth attempt reports no usage at all
        metrics |= {
            "cost_usd": round(0.01 * (n + 1) + 0.0007, 6),
            "input_tokens": 10 * n + 1,
            "output_tokens": 3 * n + 2,
            "tokens_used": 13 * n + 3,
            "num_turns": 1 + n % 3,
            "model": ["claude-a", "claude-b"][n % 2],
        }
    return metrics


async def fill(client: httpx.AsyncClient, clock: FakeClock) -> list[Done]:
    """Twelve attempts over three days: three projects, two contexts, two workers (each with
    two CLIs), two CLIs, one task retried after a failure (two results, one task)."""
    clis = {"claude": "2.1.330", "codex": "0.171.0"}
    for name in ("w1", "w2"):
        capabilities = {"claude_cli": True, "max_concurrency": 1, "clis": clis}
        await register_worker(client, name, capabilities=capabilities)
    done: list[Done] = []
    for n in range(12):
        if n % 4 == 0 and n:
            clock.advance(DAY / 2 + 3_600 * n)
        task = await create_task(
            client,
            agent_slug=["alpha", "beta", "gamma"][n % 3],
            context_id=f"ctx-{n % 2}",
            cli=["claude", "codex"][n // 2 % 2],
        )
        worker = ["w1", "w2"][n % 2]
        if n == 5:
            done.append(await attempt(client, clock, task, worker, "error", usage_of(100)))
            clock.advance(60)  # past the retry's backoff
        done.append(await attempt(client, clock, task, worker, "success", usage_of(n)))
    return done


def expected(done: list[Done], key: Any) -> dict[Any, dict[str, Any]]:
    groups: dict[Any, dict[str, Any]] = defaultdict(
        lambda: (
            {name: 0 for name in ["attempts", "succeeded", "failed", *SUMMED]} | {"tasks": set()}
        )
    )
    for d in done:
        group = groups[key(d)]
        group["attempts"] += 1
        group["tasks"].add(d.task_id)
        group["succeeded" if d.status == "success" else "failed"] += 1
        for name in SUMMED:
            group[name] += d.metrics.get(name) or 0
    return {k: v | {"tasks": len(v["tasks"])} for k, v in groups.items()}


def answered(body: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {g["key"]: {k: v for k, v in g.items() if k != "key"} for g in body["groups"]}


def close(got: dict[Any, dict[str, Any]], want: dict[Any, dict[str, Any]]) -> None:
    assert got.keys() == want.keys()
    for key, sums in want.items():
        assert got[key]["cost_usd"] == pytest.approx(sums["cost_usd"], abs=1e-9), key
        assert {k: v for k, v in got[key].items() if k != "cost_usd"} == {
            k: v for k, v in sums.items() if k != "cost_usd"
        }, key


def day_of(at: int, length_sec: int) -> str:
    start = at // (length_sec * 1000) * length_sec
    return datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_usage_sums_equal_the_reported_figures_by_every_grouping(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    first = clock.now
    done = await fill(client, clock)
    window = {"from": str(first), "to": str(clock.now + 1)}
    keys: dict[str, Any] = {
        "project": lambda d: d.project,
        "agent": lambda d: d.project,
        "context": lambda d: d.context,
        "worker": lambda d: d.worker,
        "model": lambda d: d.metrics.get("model"),
        "cli": lambda d: d.cli,
        "day": lambda d: day_of(d.at, DAY),
        "hour": lambda d: day_of(d.at, 3_600),
    }
    for group_by, key in keys.items():
        response = await client.get(f"{API}/usage", params={"group_by": group_by} | window)
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["group_by"], body["from"], body["to"]) == (group_by, first, clock.now + 1)
        assert body["truncated"] is False
        close(answered(body), expected(done, key))
        close({"all": body["total"]}, expected(done, lambda d: "all"))
        if group_by in ("day", "hour"):
            starts = [g["key"] for g in body["groups"]]
            assert starts == sorted(starts)
        else:
            costs = [g["cost_usd"] for g in body["groups"]]
            assert costs == sorted(costs, reverse=True)


async def test_the_window_and_the_limit_bound_what_is_summed(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    done = await fill(client, clock)
    # By default: from today's UTC midnight to now, included.
    today = clock.now - clock.now % (DAY * 1000)
    body = (await client.get(f"{API}/usage")).json()
    assert (body["group_by"], body["from"], body["to"]) == ("project", today, clock.now + 1)
    close({"all": body["total"]}, expected([d for d in done if d.at >= today], lambda d: "all"))
    # An ISO 8601 window is the same window as its epoch milliseconds.
    cut = done[6].at
    iso = datetime.fromtimestamp(cut / 1000, UTC).isoformat()
    late = (await client.get(f"{API}/usage", params={"from": iso})).json()
    assert late["from"] == cut
    early = (await client.get(f"{API}/usage", params={"from": "0", "to": str(cut)})).json()
    close(
        {"late": late["total"], "early": early["total"]},
        expected(done, lambda d: "late" if d.at >= cut else "early"),
    )
    # Only the costliest group is listed; the total still counts every one.
    one = (await client.get(f"{API}/usage", params={"from": "0", "limit": "1"})).json()
    assert one["truncated"] is True
    by_project = expected(done, lambda d: d.project)
    costliest = max(by_project, key=lambda p: by_project[p]["cost_usd"])
    assert [g["key"] for g in one["groups"]] == [costliest]
    assert one["total"]["attempts"] == len(done)


async def test_usage_without_results_is_zero_and_bad_queries_are_400(
    client: httpx.AsyncClient,
) -> None:
    body = (await client.get(f"{API}/usage", params={"group_by": "day"})).json()
    assert body["groups"] == []
    assert body["total"] == {
        name: 0 for name in ["attempts", "tasks", "succeeded", "failed", *SUMMED]
    }
    for params in (
        {"group_by": "planet"},
        {"from": "yesterday"},
        {"to": "2026-13-01"},
        {"from": "2000", "to": "1000"},
        {"limit": "0"},
        {"limit": "1001"},
    ):
        response = await client.get(f"{API}/usage", params=params)
        assert response.status_code == 400, (params, response.text)
        assert "error" in response.json()


async def test_a_result_carries_its_usage_as_fields(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    for metrics, want in (
        (
            usage_of(1),
            {"cost_usd": 0.0207, "num_turns": 2, "model": "claude-b", "duration_ms": 101},
        ),
        (
            {"duration_ms": 7},
            {"cost_usd": None, "num_turns": None, "model": None, "duration_ms": 7},
        ),
    ):
        task = await create_task(client)
        claimed = await claim(client, "w1")
        assert claimed is not None
        body = {"status": "success", "output": "x", "metrics": metrics}
        done = await client.post(f"{API}/llm-tasks/{task['id']}/complete", json=body)
        assert done.status_code == 200, done.text
        result = done.json()["result"]
        assert {k: result[k] for k in want} == want
        assert result["metrics"] == metrics | {"tokens_used": metrics.get("tokens_used")}
