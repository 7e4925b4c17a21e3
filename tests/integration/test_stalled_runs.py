"""Stalled runs, on both databases: a run that heartbeats but prints nothing past its
`stall_sec` is flagged once by the reaper's passes (audited, counted, shown by the API, the task
page and the gauge) and is itself again when it prints; a run that prints is never flagged;
`on_stall: retry` stops the attempt (its heartbeat refused, 409) and runs the task again, the
attempt counted; 0 turns it off, per task or runtime-wide; bad values are 400s naming the field."""

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bloom.clients.wire import LeaseInfo, StallInfo, TaskInfo
from bloom.runtime.container import Container
from bloom.runtime.services.reaping import LeaseReaper
from bloom.runtime.settings import RuntimeSettings
from tests.support.api import API, claim, create_task, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe
from tests.support.events import leased_task, post_events, texts

DEFAULT_STALL_SEC = 120
"""The runtime's default in these tests (BLOOM_STALL_SEC)."""


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, stall_sec=DEFAULT_STALL_SEC)


def container_of(client: httpx.AsyncClient) -> Container:
    return client.app.state.container  # type: ignore[attr-defined, no-any-return]


def counter(name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(generate_latest().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


async def gauge(client: httpx.AsyncClient, name: str) -> float:
    scrape = (await client.get("/metrics")).text
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} not scraped")


async def heartbeat(client: httpx.AsyncClient, grant: dict[str, Any]) -> httpx.Response:
    body = {"lease_id": grant["lease"]["id"], "worker_id": grant["lease"]["worker_id"]}
    return await client.post(f"{API}/llm-tasks/{grant['task']['id']}/heartbeat", json=body)


async def running(client: httpx.AsyncClient, worker: str = "w1", **fields: Any) -> dict[str, Any]:
    """A task claimed by `worker` and started (its first heartbeat): {lease, task}."""
    grant = await leased_task(client, worker, **fields)
    assert (await heartbeat(client, grant)).status_code == 200
    return grant


async def quiet_for(
    client: httpx.AsyncClient, clock: FakeClock, grants: list[dict[str, Any]], seconds: int
) -> None:
    """`seconds` pass, 30 at a time, the runs heartbeating (alive) and printing nothing."""
    for _ in range(seconds // 30):
        clock.advance(30)
        for grant in grants:
            assert (await heartbeat(client, grant)).status_code == 200


async def stall_entries(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    trail = (await client.get(f"{API}/audit", params={"task_id": task_id})).json()
    return [entry for entry in trail if entry["action"] == "task_stalled"]


def trail_of_stall(trail: list[dict[str, Any]]) -> str:
    (detail,) = [entry["detail"] for entry in trail if entry["action"] == "task_stalled"]
    return str(detail)


async def test_a_silent_run_that_heartbeats_is_flagged_once_and_recovers_when_it_prints(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    reaper = container_of(client).reaper
    grant = await running(client, policy={"stall_sec": 60})
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    started = clock.now
    flagged = counter("bloom_task_stalls_total", on_stall="flag")

    await quiet_for(client, clock, [grant], 60)  # exactly its stall_sec: not longer
    await reaper.reap_once()
    assert await stall_entries(client, task_id) == []
    assert "stall" not in (await client.get(f"{API}/llm-tasks/{task_id}")).json()

    await quiet_for(client, clock, [grant], 30)
    await reaper.reap_once()
    found_at = clock.now
    await quiet_for(client, clock, [grant], 30)
    await reaper.reap_once()  # a second pass: still the one stall

    (entry,) = await stall_entries(client, task_id)
    assert entry["actor"] == "reaper"
    assert "Worker w1 has printed nothing for 90 s" in entry["detail"]
    assert "flagged" in entry["detail"]
    assert counter("bloom_task_stalls_total", on_stall="flag") == flagged + 1
    assert await gauge(client, "bloom_leases_stalled") == 1
    shown = (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    assert shown["status"] == "running"  # flagged only: the run goes on
    assert shown["stall"] == {
        "lease_id": lease_id,
        "worker_id": "w1",
        "stalled_at": found_at,
        "silent_since": started,
    }
    assert TaskInfo.from_json(shown).stall == StallInfo(lease_id, "w1", found_at, started)
    (lease,) = (await client.get(f"{API}/leases")).json()
    assert LeaseInfo.from_json(lease).stalled_at == found_at
    page = (await client.get(f"/tasks/{task_id}")).text
    assert "Stalled: no output for 2 min" in page
    assert (await heartbeat(client, grant)).status_code == 200

    assert (await post_events(client, task_id, lease_id, texts(1))).status_code == 200
    assert probe.leases_of(task_id)[0]["stalled_at"] is None
    assert "stall" not in (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    assert "Stalled" not in (await client.get(f"/tasks/{task_id}")).text
    assert await gauge(client, "bloom_leases_stalled") == 0
    done = await client.post(f"{API}/llm-tasks/{task_id}/complete", json=success(lease_id=lease_id))
    assert done.status_code == 200, done.text
    assert len(await stall_entries(client, task_id)) == 1


async def test_a_run_that_prints_is_not_stalled_however_long_it_runs(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    reaper = container_of(client).reaper
    grant = await running(client, policy={"stall_sec": 60})
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    for n in range(10):  # 500 s, a line every 50 s
        await quiet_for(client, clock, [grant], 30)
        clock.advance(20)
        assert (await post_events(client, task_id, lease_id, texts(1, f"n{n}-"))).status_code == 200
        await reaper.reap_once()
    assert await stall_entries(client, task_id) == []
    assert "stall" not in (await client.get(f"{API}/llm-tasks/{task_id}")).json()


async def test_on_stall_retry_stops_the_attempt_and_runs_the_task_again_counting_it(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    reaper = container_of(client).reaper
    retried = counter("bloom_task_stalls_total", on_stall="retry")
    first = await running(client, policy={"stall_sec": 60, "on_stall": "retry"}, max_attempts=2)
    task_id = first["task"]["id"]
    await quiet_for(client, clock, [first], 90)
    await reaper.reap_once()

    task = (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    assert (task["status"], task["lease_id"], task["attempts"]) == ("queued", None, 1)
    refused = await heartbeat(client, first)
    assert refused.status_code == 409, refused.text  # the worker stops its CLI
    (lease,) = probe.leases_of(task_id)
    assert (lease["status"], lease["stalled_at"]) == ("failed", clock.now)
    trail = (await client.get(f"{API}/audit", params={"task_id": task_id})).json()
    requeued = [e["detail"] for e in trail if e["action"] == "task_requeued"]
    assert requeued == ["Stalled: no output for 90 s (worker w1, attempt 1/2)"]
    assert "its attempt is stopped and the task retried" in trail_of_stall(trail)
    assert counter("bloom_task_stalls_total", on_stall="retry") == retried + 1
    assert "stopped: stalled" in (await client.get(f"/tasks/{task_id}")).text

    second = await claim(client, "w1")
    assert second is not None
    assert second["task"]["id"] == task_id
    assert (await heartbeat(client, second)).status_code == 200
    await quiet_for(client, clock, [second], 90)
    await reaper.reap_once()
    task = (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    assert (task["status"], task["attempts"]) == ("dead", 2)  # its attempts are spent
    assert len(await stall_entries(client, task_id)) == 2


async def test_stall_sec_0_turns_it_off_for_a_task_and_the_runtimes_default_for_the_rest(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    container = container_of(client)
    await register_worker(client, "w1", slots=4)
    off = await running(client, policy={"stall_sec": 0}, context_id="c-off")
    default = await running(client, context_id="c-default")
    await quiet_for(client, clock, [off, default], DEFAULT_STALL_SEC + 30)

    runtime_off = LeaseReaper(container.db, container.signal, clock, stall_sec=0)
    await runtime_off.reap_once()  # BLOOM_STALL_SEC=0: only tasks saying so are watched
    assert await stall_entries(client, default["task"]["id"]) == []
    await container.reaper.reap_once()
    assert await stall_entries(client, off["task"]["id"]) == []
    assert len(await stall_entries(client, default["task"]["id"])) == 1


@pytest.mark.parametrize(
    "policy",
    [
        {"stall_sec": 10},
        {"stall_sec": 86_401},
        {"stall_sec": -1},
        {"stall_sec": "600"},
        {"stall_sec": 60.5},
        {"on_stall": "kill"},
    ],
)
async def test_a_bad_stall_policy_is_refused_naming_the_field(
    client: httpx.AsyncClient, policy: dict[str, Any]
) -> None:
    body = {"context_id": "c", "agent_slug": "a", "prompt": "p", "policy": policy}
    refused = await client.post(f"{API}/llm-tasks", json=body)
    assert refused.status_code == 400, refused.text
    problems = refused.json()["error"]["fieldErrors"]["policy"]
    assert any(next(iter(policy)) in problem for problem in problems), problems


async def test_a_good_stall_policy_is_kept_as_given_and_an_absent_one_left_out(
    client: httpx.AsyncClient,
) -> None:
    given = await create_task(client, policy={"stall_sec": 30, "on_stall": "retry"})
    assert given["policy"] == {
        "timeout_sec": 120,
        "budget": 0,
        "stall_sec": 30,
        "on_stall": "retry",
    }
    assert (await create_task(client, policy={"stall_sec": 0}))["policy"]["stall_sec"] == 0
    assert (await create_task(client))["policy"] == {"timeout_sec": 120, "budget": 0}


def test_the_runtimes_default_is_0_or_30_to_86400(tmp_path: Path) -> None:
    unused = "sqlite:///unused.db"
    assert make_settings(unused, tmp_path).stall_sec == 600
    assert make_settings(unused, tmp_path, stall_sec=0).stall_sec == 0
    with pytest.raises(ValueError, match=re.escape("Must be 0 (off) or 30..86400")):
        make_settings(unused, tmp_path, stall_sec=10)
