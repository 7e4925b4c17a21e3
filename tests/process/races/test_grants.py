"""Racing grants on a real server, both databases: many leases and claims at once for one task
grant exactly one, a drain by many claimers completes every task once, and no worker ever
holds more leases than its slots."""

import asyncio
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.process.races.concurrency import all_at_once, connect, open_connections, post
from tests.support.api import API, create_task, register_worker, success
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess

CONTENDERS = 50


async def bounded(n: int, coroutines: list[Awaitable[Any]]) -> list[Any]:
    """Await `coroutines` with at most `n` running at a time."""
    limit = asyncio.Semaphore(n)

    async def one(coroutine: Awaitable[Any]) -> Any:
        async with limit:
            return await coroutine

    return list(await asyncio.gather(*(one(c) for c in coroutines)))


def assert_single_grant(probe: DatabaseProbe, task_id: str, lease_id: str, worker: str) -> None:
    """The database holds exactly the one winning grant for the task, and nothing else."""
    (lease,) = probe.leases_of(task_id)
    assert (lease["id"], lease["worker_id"], lease["status"]) == (lease_id, worker, "active")
    task = probe.task(task_id)
    assert (task["status"], task["attempts"], task["lease_id"], task["worker_id"]) == (
        "leased",
        1,
        lease_id,
        worker,
    )
    assert probe.audit_actions(task_id)["task_leased"] == 1
    assert probe.active_leases_by_worker() == {worker: 1}


async def test_fifty_concurrent_leases_of_one_task_grant_exactly_one(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """50 simultaneous `POST /llm-tasks/{id}/lease`, each naming its own idle worker: one 201,
    49 409s, and the database holds one lease, one attempt and one task_leased entry."""
    names = [f"lw{i:02d}" for i in range(CONTENDERS)]
    async with connect(runtime_process) as http:
        task = await create_task(http)
        await asyncio.gather(*(register_worker(http, name) for name in names))
        await open_connections(http, CONTENDERS)
        responses = await all_at_once(
            [post(http, f"llm-tasks/{task['id']}/lease", {"worker_id": name}) for name in names]
        )
    assert Counter(r.status_code for r in responses) == {201: 1, 409: CONTENDERS - 1}
    (won,) = [r.json() for r in responses if r.status_code == 201]
    assert won["lease"]["task_id"] == task["id"]
    assert all("error" in r.json() for r in responses if r.status_code == 409)
    assert_single_grant(probe, task["id"], won["lease"]["id"], won["worker"]["id"])


async def test_fifty_workers_claiming_one_task_exactly_one_gets_it(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """50 different workers claim (no wait) while one task is queued: one 200 with that task,
    49 204s, and the database holds one lease, one attempt and one task_leased entry."""
    names = [f"cw{i:02d}" for i in range(CONTENDERS)]
    async with connect(runtime_process) as http:
        task = await create_task(http)
        await asyncio.gather(*(register_worker(http, name) for name in names))
        await open_connections(http, CONTENDERS)
        responses = await all_at_once(
            [post(http, f"workers/{name}/claim", {"wait_seconds": 0}) for name in names]
        )
    assert Counter(r.status_code for r in responses) == {200: 1, 204: CONTENDERS - 1}
    (won,) = [r.json() for r in responses if r.status_code == 200]
    assert won["task"]["id"] == task["id"]
    assert won["task"]["attempts"] == 1
    assert_single_grant(probe, task["id"], won["lease"]["id"], won["lease"]["worker_id"])


async def test_leases_and_claims_racing_for_one_task_grant_exactly_one(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """Both ways of granting at once: 25 pushed leases and 25 claims for the only queued task.
    One grant in total; the other leases get 409 and the other claims 204."""
    half = CONTENDERS // 2
    names = [f"mw{i:02d}" for i in range(CONTENDERS)]
    async with connect(runtime_process) as http:
        task = await create_task(http)
        await asyncio.gather(*(register_worker(http, name) for name in names))
        await open_connections(http, CONTENDERS)
        calls = [
            post(http, f"llm-tasks/{task['id']}/lease", {"worker_id": name})
            if i % 2
            else post(http, f"workers/{name}/claim", {"wait_seconds": 0})
            for i, name in enumerate(names)
        ]
        responses = await all_at_once(calls)
    leases = Counter(r.status_code for r in responses[1::2])
    claims = Counter(r.status_code for r in responses[0::2])
    assert leases[201] + claims[200] == 1
    assert leases == Counter({201: leases[201], 409: half - leases[201]})
    assert claims == Counter({200: claims[200], 204: half - claims[200]})
    (won,) = [r.json() for r in responses if r.status_code in (200, 201)]
    lease = won["lease"]
    assert_single_grant(probe, task["id"], lease["id"], lease["worker_id"])


@dataclass
class Ledger:
    """What the claimers saw, checked as they see it.

    A slot counts as holding its lease from the claim response until it *sends* complete: the
    server may free the slot from then on. So the client-side count never exceeds the server's
    real count at the moment of the latest grant, and a count above capacity proves an over-grant.
    """

    capacity: dict[str, int]
    total: int
    held: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    lease_ids: set[str] = field(default_factory=set)
    claimed_tasks: set[str] = field(default_factory=set)
    empty_claims: Counter[str] = field(default_factory=Counter)
    completed: int = 0

    @property
    def done(self) -> bool:
        return self.completed >= self.total

    def claimed(self, worker: str, body: dict[str, Any]) -> None:
        lease, task = body["lease"], body["task"]
        assert lease["worker_id"] == worker
        assert lease["task_id"] == task["id"]
        assert lease["id"] not in self.lease_ids, f"lease {lease['id']} handed out twice"
        assert task["id"] not in self.claimed_tasks, f"task {task['id']} claimed twice"
        self.lease_ids.add(lease["id"])
        self.claimed_tasks.add(task["id"])
        self.held[worker] += 1
        self.peak[worker] = max(self.peak[worker], self.held[worker])
        assert self.held[worker] <= self.capacity[worker], (
            f"worker {worker} holds {self.held[worker]} leases, max_concurrency "
            f"{self.capacity[worker]}"
        )

    def letting_go(self, worker: str) -> None:
        self.held[worker] -= 1


async def run_slot(
    http: httpx.AsyncClient, worker: str, ledger: Ledger, wait: float, pause: float = 0
) -> None:
    """One claimer: claim → heartbeat → complete, until every task is completed."""
    while not ledger.done:
        response = await http.post(f"{API}/workers/{worker}/claim", json={"wait_seconds": wait})
        if response.status_code == 204:
            ledger.empty_claims[worker] += 1
            await asyncio.sleep(pause)
            continue
        assert response.status_code == 200, response.text
        body = response.json()
        ledger.claimed(worker, body)
        task_id, lease_id = body["task"]["id"], body["lease"]["id"]
        beat = await http.post(f"{API}/llm-tasks/{task_id}/heartbeat", json={"lease_id": lease_id})
        assert beat.status_code == 200, beat.text
        assert beat.json()["task_status"] == "running"
        ledger.letting_go(worker)
        done = await http.post(
            f"{API}/llm-tasks/{task_id}/complete",
            json=success(f"out-{task_id}", lease_id=lease_id),
        )
        assert done.status_code == 200, done.text
        assert "Idempotent-Replayed" not in done.headers
        assert done.json()["task"]["status"] == "completed"
        ledger.completed += 1


@dataclass
class ServerView:
    samples: int = 0
    peak: Counter[str] = field(default_factory=Counter)


async def watch_capacity(
    http: httpx.AsyncClient,
    probe: DatabaseProbe,
    capacity: dict[str, int],
    stop: asyncio.Event,
    view: ServerView,
) -> None:
    """Sample the server's own count (GET /workers) and the database's active leases per worker
    while the claimers run; neither may ever exceed a worker's max_concurrency."""
    while not stop.is_set():
        workers = (await http.get(f"{API}/workers")).json()
        counts = {w["id"]: w["active_leases"] for w in workers}
        in_db = await asyncio.to_thread(probe.active_leases_by_worker)
        for source in (counts, in_db):
            for worker, active in source.items():
                assert active <= capacity[worker], f"{worker}: {active} active leases ({source})"
                view.peak[worker] = max(view.peak[worker], active)
        view.samples += 1
        await asyncio.sleep(0.1)


async def drain(
    server: RuntimeProcess,
    probe: DatabaseProbe,
    *,
    tasks: int,
    slots: dict[str, int],
    capacity: dict[str, int],
    wait: float,
    pause: float = 0,
) -> tuple[list[str], Ledger, ServerView]:
    """Create `tasks` tasks, then drain them with `slots[w]` concurrent claimers per worker."""
    async with connect(server) as http:
        for worker, slot_count in capacity.items():
            await register_worker(http, worker, slots=slot_count)
        created = await bounded(
            32, [create_task(http, context_id=f"ctx-{i}") for i in range(tasks)]
        )
        ledger, view, stop = Ledger(capacity, tasks), ServerView(), asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(watch_capacity(http, probe, capacity, stop, view))
            claimers = [
                group.create_task(run_slot(http, worker, ledger, wait, pause))
                for worker, count in slots.items()
                for _ in range(count)
            ]
            await asyncio.gather(*claimers)
            stop.set()
    return [task["id"] for task in created], ledger, view


def assert_each_task_done_once(probe: DatabaseProbe, task_ids: list[str], ledger: Ledger) -> None:
    """Every task completed on its first attempt by exactly one lease, with exactly one success
    result and one artifact, holding that task's own output."""
    tasks = probe.tasks()
    assert sorted(t["id"] for t in tasks) == sorted(task_ids)
    assert {(t["status"], t["attempts"]) for t in tasks} == {("completed", 1)}
    assert ledger.claimed_tasks == set(task_ids)

    leases = probe.all_leases()
    assert {lease["id"] for lease in leases} == ledger.lease_ids
    assert Counter(lease["task_id"] for lease in leases) == Counter(task_ids)
    assert {lease["status"] for lease in leases} == {"released"}

    results = probe.results()
    assert Counter(r["task_id"] for r in results) == Counter(task_ids)
    assert {r["status"] for r in results} == {"success"}
    assert {r["lease_id"] for r in results} == ledger.lease_ids

    artifacts = {a["id"]: a for a in probe.artifacts()}
    assert Counter(a["task_id"] for a in artifacts.values()) == Counter(task_ids)
    for result in results:
        artifact = artifacts[result["artifact_id"]]
        assert artifact["task_id"] == result["task_id"]
        assert artifact["content"] == f"out-{result['task_id']}"

    completed = [e["task_id"] for e in probe.audit() if e["action"] == "task_completed"]
    assert Counter(completed) == Counter(task_ids)


async def test_a_thousand_tasks_drained_by_sixteen_claimers_each_exactly_once(
    runtime_process: RuntimeProcess, probe: DatabaseProbe, database_url: str
) -> None:
    """1,000 tasks (400 on SQLite, whose writers queue up one at a time anyway), 16 claimers on
    8 workers (2 claimers each; max_concurrency 1 on half of them, so those are over-subscribed,
    and 2 on the others). Every task completes exactly once, and no worker ever holds more
    leases than its max_concurrency: not as the claimers count, not as the server reports, not
    in the database."""
    tasks = 1000 if database_url.startswith("postgresql") else 400
    capacity = {f"dw{i}": 1 if i % 2 else 2 for i in range(8)}
    slots = dict.fromkeys(capacity, 2)
    task_ids, ledger, view = await drain(
        runtime_process, probe, tasks=tasks, slots=slots, capacity=capacity, wait=1.0
    )
    assert ledger.completed == tasks
    assert all(ledger.peak[w] <= capacity[w] for w in capacity), ledger.peak
    assert view.samples > 0
    assert all(view.peak[w] <= capacity[w] for w in capacity), view.peak
    assert sum(view.peak.values()) > 0  # the samples did see leases in flight
    assert_each_task_done_once(probe, task_ids, ledger)
    async with connect(runtime_process) as http:  # and the API agrees, for a sample
        for task_id in task_ids[::50]:
            response = await http.get(f"{API}/artifacts", params={"task_id": task_id})
            assert [a["content"] for a in response.json()] == [f"out-{task_id}"]


async def test_worker_with_one_slot_never_holds_two_leases_under_three_claimers(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """A worker with max_concurrency 1 driven by 3 concurrent claimers: while one claimer holds
    its lease the others' claims answer 204, and the worker never holds two leases."""
    task_ids, ledger, view = await drain(
        runtime_process,
        probe,
        tasks=60,
        slots={"solo": 3},
        capacity={"solo": 1},
        wait=0,
        pause=0.005,
    )
    assert ledger.peak["solo"] == 1
    assert view.peak["solo"] <= 1
    assert ledger.empty_claims["solo"] > 0  # the extra claimers were indeed turned away
    assert_each_task_done_once(probe, task_ids, ledger)
