"""The engine under contention, on both databases: one winner per task, never a worker above its
capacity, stale leases fenced off, and a repeated complete recorded once.

The contention tests run against a real server process with truly concurrent connections; the
fencing tests run in-process on the fake clock, so a lease can be made to lapse exactly.
"""

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess

CONTENDERS = 50


def connect(server: RuntimeProcess, connections: int = 64) -> httpx.AsyncClient:
    """A client that keeps `connections` sockets open, so a burst of requests is not queued."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60)


async def open_connections(http: httpx.AsyncClient, n: int) -> None:
    """Open `n` keep-alive connections now, so the burst that follows does not wait on TCP."""
    await asyncio.gather(*(http.get(f"{API}/health") for _ in range(n)))


async def all_at_once(calls: list[Callable[[], Awaitable[httpx.Response]]]) -> list[httpx.Response]:
    """Start every call, then release them together from one gate."""
    gate = asyncio.Event()

    async def gated(call: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        await gate.wait()
        return await call()

    pending = [asyncio.create_task(gated(call)) for call in calls]
    await asyncio.sleep(0)  # every call is now parked at the gate
    gate.set()
    return list(await asyncio.gather(*pending))


async def bounded(n: int, coroutines: list[Awaitable[Any]]) -> list[Any]:
    """Await `coroutines` with at most `n` running at a time."""
    limit = asyncio.Semaphore(n)

    async def one(coroutine: Awaitable[Any]) -> Any:
        async with limit:
            return await coroutine

    return list(await asyncio.gather(*(one(c) for c in coroutines)))


def post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    return lambda: http.post(f"{API}/{path}", json=body)


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


# 1. Fifty concurrent grants of one queued task: exactly one wins.


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


# 2. Draining a big queue with many claimers: each task once, no worker above capacity.


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


@pytest.mark.slow
async def test_two_thousand_tasks_drained_by_sixteen_claimers_each_exactly_once(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """2,000 tasks, 16 claimers on 8 workers (2 claimers each; max_concurrency 1 on half of them,
    so those are over-subscribed, and 2 on the others). Every task completes exactly once, and
    no worker ever holds more leases than its max_concurrency: not as the claimers count, not as
    the server reports, not in the database."""
    capacity = {f"dw{i}": 1 if i % 2 else 2 for i in range(8)}
    slots = dict.fromkeys(capacity, 2)
    task_ids, ledger, view = await drain(
        runtime_process, probe, tasks=2000, slots=slots, capacity=capacity, wait=1.0
    )
    assert ledger.completed == 2000
    assert all(ledger.peak[w] <= capacity[w] for w in capacity), ledger.peak
    assert view.samples > 0
    assert all(view.peak[w] <= capacity[w] for w in capacity), view.peak
    assert sum(view.peak.values()) > 0  # the samples did see leases in flight
    assert_each_task_done_once(probe, task_ids, ledger)
    async with connect(runtime_process) as http:  # and the API agrees, for a sample
        for task_id in task_ids[::100]:
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


# 3. A superseded, released or lapsed lease is fenced off: 409, and nothing changes.


def container_of(client: httpx.AsyncClient) -> Any:
    return client.app.state.container  # type: ignore[attr-defined]


async def send(
    client: httpx.AsyncClient, task_id: str, action: str, body: dict[str, Any]
) -> httpx.Response:
    return await client.post(f"{API}/llm-tasks/{task_id}/{action}", json=body)


async def assert_refused_without_change(
    client: httpx.AsyncClient,
    probe: DatabaseProbe,
    task_id: str,
    stale_lease: str,
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    """Each call answers 409 naming the stale lease, and the database is exactly as before."""
    before = probe.snapshot(task_id)
    for action, body in calls:
        response = await send(client, task_id, action, body)
        assert response.status_code == 409, (action, response.text)
        assert stale_lease in response.json()["error"], (action, response.text)
        assert probe.snapshot(task_id) == before, action


async def claim_then_lose_to_another_worker(
    client: httpx.AsyncClient, clock: FakeClock
) -> tuple[str, str, str]:
    """Worker A claims and goes silent; its claim lapses, the reaper requeues the task, and
    worker B claims it. Returns (task id, A's lease, B's lease)."""
    task = await create_task(client)
    await register_worker(client, "A")
    await register_worker(client, "B")
    first = await claim(client, "A")
    assert first is not None
    # Past A's 30 s claim-ack window, and past the 60 s after which a silent worker no longer
    # keeps first call on the tasks of its contexts.
    clock.advance(61)
    assert await container_of(client).reaper.reap_once() == 1
    second = await claim(client, "B")
    assert second is not None
    assert second["task"]["id"] == task["id"]
    assert second["lease"]["id"] != first["lease"]["id"]
    return task["id"], first["lease"]["id"], second["lease"]["id"]


async def test_superseded_lease_cannot_heartbeat_or_complete(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    """After A's lease expired and B holds the task, A's heartbeat and complete naming its old
    lease are refused with 409, a complete naming worker A without a lease (so B's, the task's
    current one) with 403, and none changes anything; B then finishes the task normally."""
    task_id, old, new = await claim_then_lose_to_another_worker(client, clock)
    lease_a = probe.leases_of(task_id)[0]
    assert (lease_a["id"], lease_a["status"]) == (old, "expired")
    await assert_refused_without_change(
        client,
        probe,
        task_id,
        old,
        [
            ("heartbeat", {"lease_id": old}),
            ("heartbeat", {"lease_id": old, "worker_id": "A"}),
            ("complete", success("late", lease_id=old)),
            ("complete", failure("late", lease_id=old)),
            ("complete", success("late", lease_id=old, worker_id="A")),
        ],
    )
    before = probe.snapshot(task_id)
    refused = await send(client, task_id, "complete", success("late", worker_id="A"))
    assert refused.status_code == 403  # B's lease is the task's current one, and it is not A's
    assert probe.snapshot(task_id) == before

    assert (await send(client, task_id, "heartbeat", {"lease_id": new})).status_code == 200
    done = await send(client, task_id, "complete", success("by B", lease_id=new))
    assert done.status_code == 200, done.text
    assert (done.json()["task"]["status"], done.json()["result"]["worker_id"]) == ("completed", "B")
    assert [r["lease_id"] for r in probe.results()] == [new]


async def test_released_lease_cannot_complete_differently_or_heartbeat(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """Once a lease completed the task (and was released), a complete with another status or a
    heartbeat naming it is refused with 409 and changes nothing."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    lease_id = claimed["lease"]["id"]
    done = await send(client, task["id"], "complete", success(lease_id=lease_id))
    assert done.status_code == 200, done.text
    assert probe.leases_of(task["id"])[0]["status"] == "released"
    await assert_refused_without_change(
        client,
        probe,
        task["id"],
        lease_id,
        [
            ("complete", failure(lease_id=lease_id)),
            ("heartbeat", {"lease_id": lease_id}),
        ],
    )


async def test_lapsed_lease_is_not_revived_before_the_reaper_runs(
    client: httpx.AsyncClient, clock: FakeClock, probe: DatabaseProbe
) -> None:
    """A lease past its expiry that the reaper has not seen yet is dead all the same: heartbeat
    and complete answer 409 and change nothing (expires_at stays put), and the reaper then
    expires it and requeues the task."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    lease_id = claimed["lease"]["id"]
    beat = await send(client, task["id"], "heartbeat", {"lease_id": lease_id})
    assert beat.status_code == 200
    clock.advance(301)  # past the full 300 s TTL the heartbeat granted
    assert probe.leases_of(task["id"])[0]["status"] == "active"  # nobody has reaped it yet
    await assert_refused_without_change(
        client,
        probe,
        task["id"],
        lease_id,
        [
            ("heartbeat", {"lease_id": lease_id}),
            ("heartbeat", {}),
            ("complete", success(lease_id=lease_id)),
            ("complete", success()),
        ],
    )
    assert await container_of(client).reaper.reap_once() == 1
    (lease,) = probe.leases_of(task["id"])
    assert lease["status"] == "expired"
    after = probe.task(task["id"])
    assert (after["status"], after["lease_id"], after["attempts"]) == ("queued", None, 1)
    actions = probe.audit_actions(task["id"])
    assert (actions["lease_expired"], actions["task_requeued"]) == (1, 1)
    assert probe.results() == []


# 4. The same complete twice: one result, one artifact.


async def test_repeated_complete_replays_the_first_outcome(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """Completing the same lease again with the same status answers 200 with the first outcome
    (same result, same artifact) and Idempotent-Replayed: true, and records nothing new."""
    task = await create_task(client)
    await register_worker(client, "w1")
    claimed = await claim(client, "w1")
    assert claimed is not None
    body = success("once", lease_id=claimed["lease"]["id"])
    first = await send(client, task["id"], "complete", body)
    assert first.status_code == 200, first.text
    assert "Idempotent-Replayed" not in first.headers
    before = probe.snapshot(task["id"])
    for repeat in (body, success("twice", lease_id=claimed["lease"]["id"])):
        again = await send(client, task["id"], "complete", repeat)
        assert again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert probe.snapshot(task["id"]) == before
    assert len(probe.results()) == len(probe.artifacts()) == 1


ROUNDS = 8  # leases completed concurrently, each by a burst of duplicates
DUPLICATES = 10


async def running_tasks(http: httpx.AsyncClient, n: int) -> list[tuple[str, str]]:
    """`n` tasks claimed and heartbeated by one worker: [(task id, lease id)]."""
    await register_worker(http, "w1", slots=n)
    for i in range(n):
        await create_task(http, context_id=f"ctx-{i}")
    running = []
    for _ in range(n):
        claimed = await claim(http, "w1")
        assert claimed is not None
        task_id, lease_id = claimed["task"]["id"], claimed["lease"]["id"]
        beat = await http.post(f"{API}/llm-tasks/{task_id}/heartbeat", json={"lease_id": lease_id})
        assert beat.status_code == 200
        running.append((task_id, lease_id))
    return running


async def complete_in_bursts(
    server: RuntimeProcess, bodies: Callable[[str], list[dict[str, Any]]]
) -> list[tuple[str, str, list[dict[str, Any]], list[httpx.Response]]]:
    """For each of ROUNDS running leases, send all of `bodies(lease_id)` at once; every burst
    at the same moment. Returns [(task id, lease id, bodies, responses)]."""
    async with connect(server, ROUNDS * DUPLICATES) as http:
        running = await running_tasks(http, ROUNDS)
        await open_connections(http, ROUNDS * DUPLICATES)
        plan = [(task_id, lease_id, bodies(lease_id)) for task_id, lease_id in running]
        calls = [
            post(http, f"llm-tasks/{task_id}/complete", body)
            for task_id, _, burst in plan
            for body in burst
        ]
        responses = await all_at_once(calls)
    return [
        (task_id, lease_id, burst, responses[i * DUPLICATES : (i + 1) * DUPLICATES])
        for i, (task_id, lease_id, burst) in enumerate(plan)
    ]


async def test_ten_concurrent_duplicate_completes_record_one_result(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """10 simultaneous identical completes of one lease (for 8 leases at once): all answer 200
    with the same result and artifact, exactly one is the original (the rest say
    Idempotent-Replayed), and the database holds one result, one artifact and one
    task_completed entry per lease."""
    bursts = await complete_in_bursts(
        runtime_process, lambda lease_id: [success("only once", lease_id=lease_id)] * DUPLICATES
    )
    results = {r["lease_id"]: r for r in probe.results()}
    assert len(probe.results()) == len(results) == ROUNDS
    artifacts = {a["id"]: a for a in probe.artifacts()}
    assert len(artifacts) == ROUNDS
    for task_id, lease_id, _, responses in bursts:
        assert [r.status_code for r in responses] == [200] * DUPLICATES, [r.text for r in responses]
        result = results[lease_id]
        assert {r.json()["result"]["id"] for r in responses} == {result["id"]}
        assert {r.json()["artifact"]["id"] for r in responses} == {result["artifact_id"]}
        assert artifacts[result["artifact_id"]]["task_id"] == task_id
        replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
        assert sorted(replayed, key=str) == [None] + ["true"] * (DUPLICATES - 1)
        assert probe.audit_actions(task_id)["task_completed"] == 1
        assert probe.task(task_id)["status"] == "completed"
        assert [lease["status"] for lease in probe.leases_of(task_id)] == ["released"]


async def test_conflicting_concurrent_completes_keep_one_outcome(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    """5 success and 5 error completes of one lease at once (for 8 leases at once): one outcome
    wins; the completes that agree with it answer 200 with that same result, one of them as the
    original, and the others 409; one result recorded per lease."""
    bursts = await complete_in_bursts(
        runtime_process,
        lambda lease_id: (
            [success(lease_id=lease_id), failure(lease_id=lease_id)] * (DUPLICATES // 2)
        ),
    )
    results = {r["lease_id"]: r for r in probe.results()}
    assert len(probe.results()) == len(results) == ROUNDS
    for task_id, lease_id, bodies, responses in bursts:
        result = results[lease_id]
        for body, response in zip(bodies, responses, strict=True):
            if body["status"] == result["status"]:
                assert response.status_code == 200, response.text
                assert response.json()["result"]["id"] == result["id"]
            else:
                assert response.status_code == 409, response.text
        originals = [
            r for r in responses if r.is_success and "Idempotent-Replayed" not in r.headers
        ]
        assert len(originals) == 1
        assert probe.audit_actions(task_id)["task_completed"] == 1
        expected_artifacts = 1 if result["status"] == "success" else 0
        assert len([a for a in probe.artifacts() if a["task_id"] == task_id]) == expected_artifacts
