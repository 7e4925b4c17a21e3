"""Our outages are not the workers' fault. PostgreSQL stopped hard under load, and the runtime
killed with -9, each for longer than the lease TTL, while workers keep working and heartbeating
into the void: afterwards every task ran exactly once and completed, none was lost or stranded;
during the database's outage every answer was a 503 with Retry-After (never another 5xx),
`/health` said 503 `unreachable`, and the log said one warning and one recovery line, with no
traceback. A worker that really died in the outage is still found, one TTL after it ended.
"""

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest

from bloom.db.database import resolve_database
from bloom.runtime.storage.schema import SCHEMA
from bloom.runtime.storage.tables import leases, llm_tasks
from tests.support.api import API, success
from tests.support.db import DatabaseProbe
from tests.support.postgres import PostgresCluster
from tests.support.server import RuntimeProcess

TTL_SEC = 5  # the least the runtime allows
SETTINGS = {
    "BLOOM_LEASE_TTL_SEC": str(TTL_SEC),
    "BLOOM_CLAIM_ACK_SEC": str(TTL_SEC),
    "BLOOM_REAPER_INTERVAL_SEC": "0.3",
    "BLOOM_LOG_FORMAT": "console",
}
OUTAGE_SEC = TTL_SEC + 3
WORK_SEC = 2.0
TASKS = 24
WORKERS = 4
DYING = "dying"


@dataclass
class Fleet:
    """What the simulated workers and the prober did and saw."""

    started: Counter[str] = field(default_factory=Counter)  # task -> executions begun
    began: dict[str, float] = field(default_factory=dict)  # task -> when its last run began
    completed: set[str] = field(default_factory=set)
    statuses: Counter[int] = field(default_factory=Counter)
    without_retry_after: int = 0
    health: list[tuple[int, str]] = field(default_factory=list)  # (status, database) seen
    dying_task: str | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def mid_work(self) -> set[str]:
        """The live workers' tasks begun less than half a run ago: each has a second or more of
        heartbeats ahead of it."""
        recent = time.monotonic() - WORK_SEC / 2
        return {
            task
            for task, began in list(self.began.items())  # read from another thread
            if began > recent and task not in self.completed and task != self.dying_task
        }

    def saw(self, response: httpx.Response) -> httpx.Response:
        self.statuses[response.status_code] += 1
        if response.status_code == 503 and "retry-after" not in response.headers:
            self.without_retry_after += 1
        return response


async def call(
    http: httpx.AsyncClient, fleet: Fleet, path: str, body: dict[str, object]
) -> httpx.Response | None:
    """A POST as a worker makes it; None when the runtime did not answer at all."""
    try:
        return fleet.saw(await http.post(f"{API}{path}", json=body))
    except httpx.TransportError:
        return None


async def run_task(http: httpx.AsyncClient, fleet: Fleet, task_id: str, lease_id: str) -> None:
    """Work WORK_SEC, heartbeating every half second whatever the runtime answers (a refusal of
    the lease ends the work); then complete, retrying until the runtime takes it."""
    fleet.started[task_id] += 1
    fleet.began[task_id] = time.monotonic()
    deadline = time.monotonic() + WORK_SEC
    while time.monotonic() < deadline:
        beat = await call(http, fleet, f"/llm-tasks/{task_id}/heartbeat", {"lease_id": lease_id})
        if beat is not None and beat.status_code in (403, 404, 409):
            return
        await asyncio.sleep(0.5)
    while not fleet.stop.is_set():
        done = await call(http, fleet, f"/llm-tasks/{task_id}/complete", success(lease_id=lease_id))
        if done is not None and done.status_code == 200:
            fleet.completed.add(task_id)
            return
        if done is not None and done.status_code in (403, 404, 409):
            return
        await asyncio.sleep(0.5)


async def work(http: httpx.AsyncClient, fleet: Fleet, worker: str) -> None:
    while not fleet.stop.is_set():
        grant = await call(http, fleet, f"/workers/{worker}/claim", {"wait_seconds": 1})
        if grant is None or grant.status_code != 200:
            await asyncio.sleep(0.3)
            continue
        body = grant.json()
        await run_task(http, fleet, body["task"]["id"], body["lease"]["id"])


async def die_in_the_outage(http: httpx.AsyncClient, fleet: Fleet, outage: asyncio.Event) -> None:
    """A worker that takes one task, heartbeats it until the outage begins, and is never heard
    from again."""
    while fleet.dying_task is None:
        grant = await call(http, fleet, f"/workers/{DYING}/claim", {"wait_seconds": 1})
        if grant is not None and grant.status_code == 200:
            fleet.dying_task = grant.json()["task"]["id"]
            fleet.started[fleet.dying_task] += 1
            lease_id = grant.json()["lease"]["id"]
    while not outage.is_set():
        await call(http, fleet, f"/llm-tasks/{fleet.dying_task}/heartbeat", {"lease_id": lease_id})
        await asyncio.sleep(0.5)


async def probe_health(http: httpx.AsyncClient, fleet: Fleet) -> None:
    while not fleet.stop.is_set():
        try:
            answer = await http.get(f"{API}/health")
            fleet.health.append((answer.status_code, answer.json().get("database", "")))
        except (httpx.TransportError, ValueError):
            fleet.health.append((0, ""))
        await asyncio.sleep(0.25)


async def register(http: httpx.AsyncClient, names: list[str]) -> None:
    for name in names:
        body = {"name": name, "capabilities": {"claude_cli": True, "max_concurrency": 1}}
        assert (await http.post(f"{API}/workers", json=body)).status_code == 201


async def create_tasks(http: httpx.AsyncClient, count: int) -> set[str]:
    created = set()
    for n in range(count):
        body = {"context_id": f"ctx-{n}", "agent_slug": "default", "prompt": "p"}
        answer = await http.post(f"{API}/llm-tasks", json=body)
        assert answer.status_code == 201, answer.text
        created.add(answer.json()["id"])
    return created


async def until(
    condition: Callable[[], bool], what: str, timeout: float, log: RuntimeProcess
) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{log.log()[-4000:]}")
        await asyncio.sleep(0.2)


def check_nothing_lost_or_run_twice(fleet: Fleet, created: set[str], probe: DatabaseProbe) -> None:
    twice = {task for task, runs in fleet.started.items() if runs > 1 and task != fleet.dying_task}
    assert twice == set(), f"executed more than once: {twice}"
    assert created <= fleet.completed, "a task never completed"
    statuses = Counter(row["status"] for row in probe.rows(llm_tasks.select()))
    assert statuses == Counter({"completed": len(created)}), statuses
    assert probe.count(leases, leases.c.status == "active") == 0, "a lease left active"


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL of this test's own, which it stops hard and starts again."""
    own = PostgresCluster(durable=True)
    own.start()
    with psycopg.connect(own.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bloom")
    SCHEMA.upgrade(resolve_database(own.url("bloom"), Path()))
    yield own
    own.stop()


async def test_database_outage_longer_than_the_ttl_runs_nothing_twice(
    cluster: PostgresCluster, tmp_path: Path
) -> None:
    runtime = RuntimeProcess(cluster.url("bloom"), tmp_path, **SETTINGS)
    runtime.start()
    probe = DatabaseProbe(cluster.url("bloom"))
    fleet, outage = Fleet(), asyncio.Event()
    workers = [f"w{n}" for n in range(WORKERS)]
    try:
        async with httpx.AsyncClient(base_url=runtime.url, timeout=10) as http:
            await register(http, [*workers, DYING])
            created = await create_tasks(http, TASKS)
            async with asyncio.TaskGroup() as group:
                group.create_task(die_in_the_outage(http, fleet, outage))
                for worker in workers:
                    group.create_task(work(http, fleet, worker))
                group.create_task(probe_health(http, fleet))
                await until(lambda: len(fleet.completed) >= WORKERS, "some work", 30, runtime)
                await until(lambda: fleet.dying_task is not None, "the dying claim", 10, runtime)
                # The workers run in step, so all of them can be between a complete and their
                # next grant at once: wait for one that is mid-run when the database goes.
                await until(lambda: bool(fleet.mid_work()), "a task mid-run", 10, runtime)

                outage.set()
                await asyncio.to_thread(cluster.crash)
                await asyncio.sleep(OUTAGE_SEC)
                during = list(fleet.health)
                await asyncio.to_thread(cluster.resume)
                back = time.monotonic()

                await until(
                    lambda: probe.count(llm_tasks, llm_tasks.c.status == "completed") == TASKS,
                    "every task completed",
                    90,
                    runtime,
                )
                fleet.stop.set()
            requeued_after = time.monotonic() - back
    finally:
        probe.close()
        runtime.stop()

    check_nothing_lost_or_run_twice(fleet, created, probe)
    assert fleet.dying_task is not None
    assert fleet.started[fleet.dying_task] == 2, "the dead worker's task ran again, once"
    assert requeued_after < 60
    other_5xx = {s: n for s, n in fleet.statuses.items() if s >= 500 and s != 503}
    assert other_5xx == {}, fleet.statuses
    assert fleet.statuses[503] > 0
    assert fleet.without_retry_after == 0
    assert (503, "unreachable") in during
    assert fleet.health[-1] == (200, "ok")
    log = runtime.log()
    assert log.count("database_unreachable") == 1, log[-4000:]
    assert log.count("database_recovered") == 1, log[-4000:]
    assert "unhandled_error" not in log, log[-4000:]
    assert "Traceback" not in log, log[-4000:]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_runtime_down_longer_than_the_ttl_runs_nothing_twice(
    database_url: str, tmp_path: Path, probe: DatabaseProbe
) -> None:
    runtime = RuntimeProcess(database_url, tmp_path, **SETTINGS)
    runtime.start()
    fleet = Fleet()
    workers = [f"w{n}" for n in range(WORKERS)]
    try:
        async with httpx.AsyncClient(base_url=runtime.url, timeout=10) as http:
            await register(http, workers)
            created = await create_tasks(http, TASKS)
            async with asyncio.TaskGroup() as group:
                for worker in workers:
                    group.create_task(work(http, fleet, worker))
                await until(lambda: len(fleet.completed) >= WORKERS, "some work", 30, runtime)
                runtime.kill()
                await asyncio.sleep(OUTAGE_SEC)
                await asyncio.to_thread(runtime.start)
                await until(
                    lambda: probe.count(llm_tasks, llm_tasks.c.status == "completed") == TASKS,
                    "every task completed",
                    90,
                    runtime,
                )
                fleet.stop.set()
    finally:
        runtime.stop()
    check_nothing_lost_or_run_twice(fleet, created, probe)
    assert "leases_renewed_after_outage" in runtime.log()
