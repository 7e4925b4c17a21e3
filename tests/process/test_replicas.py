"""Several runtime replicas on one PostgreSQL, and real workers given all their URLs: one replica
killed with -9 under load loses nothing and runs nothing twice. The workers fail over to the next
URL; the reaper on a survivor (an advisory lock, not a leader of its own) finds the lease of a
worker killed at the same moment within its TTL; a task created on one survivor wakes a long
poll waiting on another (NOTIFY), well before that poll would have ended by itself.
"""

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom.runtime.storage.tables import audit_logs, llm_results
from tests.support.api import API
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess
from tests.support.stack import wait_for
from tests.support.worker import EchoModelProcess, WorkerProcess

TTL_SEC = 5
CLAIM_WAIT_SEC = 20  # a wake-up well before this is NOTIFY's doing
REPLICA = {
    "BLOOM_REAPER_INTERVAL_SEC": "0.5",
    "BLOOM_CLAIM_RECHECK_SEC": str(CLAIM_WAIT_SEC),
    "BLOOM_LOG_FORMAT": "console",
}
WORKER = {
    "BLOOM_WORKER_LEASE_TTL_SEC": str(TTL_SEC),
    "BLOOM_WORKER_CLAIM_WAIT_SEC": str(CLAIM_WAIT_SEC),
}
TASKS = 8


@pytest.fixture
def model(tmp_path: Path) -> Iterator[EchoModelProcess]:
    process = EchoModelProcess(tmp_path)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[list[RuntimeProcess]]:
    started = [RuntimeProcess(database_url, tmp_path / f"r{n}", **REPLICA) for n in range(3)]
    for replica in started:
        replica.start()
    yield started
    for replica in started:
        replica.stop()


def submit(replica: RuntimeProcess, prompt: str) -> str:
    body = {"context_id": f"ctx-{time.monotonic_ns()}", "agent_slug": "default", "prompt": prompt}
    created = httpx.post(f"{replica.url}{API}/llm-tasks", json=body, timeout=10)
    assert created.status_code == 201, created.text
    task_id: str = created.json()["id"]
    return task_id


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_replica_killed_under_load_loses_nothing_and_runs_nothing_twice(
    replicas: list[RuntimeProcess],
    model: EchoModelProcess,
    probe: DatabaseProbe,
    tmp_path: Path,
    claude: Path,
) -> None:
    doomed, survivor, other = replicas
    urls = f"{doomed.url},{survivor.url}"
    workers = {
        name: WorkerProcess(name, tmp_path / name, urls, model.url, claude, **WORKER)
        for name in ("steady-1", "steady-2", "doomed-worker")
    }
    try:
        for worker in workers.values():
            worker.start()
        tasks = [submit(other, f"task {n} [[sleep 2]]") for n in range(TASKS)]
        wait_for(lambda: len(probe.active_leases()) == len(workers), 60, "every worker busy")
        doomed_task = next(
            lease["task_id"]
            for lease in probe.active_leases()
            if lease["worker_id"] == "doomed-worker"
        )
        workers["doomed-worker"].kill()
        doomed.kill()

        def all_done() -> bool:
            return probe.count(llm_results) >= TASKS

        wait_for(all_done, 120, "every task done through the survivors")
        late = submit(other, "after the kill")  # the workers long-poll on `survivor` now
        created = time.monotonic()
        wait_for(lambda: probe.task(late)["status"] != "queued", 30, "the late task leased")
        woken_after = time.monotonic() - created
        wait_for(lambda: probe.task(late)["status"] == "completed", 60, "the late task done")
    finally:
        for worker in workers.values():
            worker.kill()

    for task_id in tasks:
        assert probe.task(task_id)["status"] == "completed", probe.task(task_id)
        runs = probe.count(
            audit_logs, audit_logs.c.task_id == task_id, audit_logs.c.action == "task_running"
        )  # a lease whose claim answer died with the replica never ran: not counted
        assert runs == (2 if task_id == doomed_task else 1), (task_id, probe.leases_of(task_id))
        assert probe.count(llm_results, llm_results.c.task_id == task_id) == 1
    reaped = [lease for lease in probe.leases_of(doomed_task) if lease["status"] == "expired"]
    assert len(reaped) == 1
    assert woken_after < CLAIM_WAIT_SEC / 4, f"the late task waited {woken_after:.1f}s"
    for name in ("steady-1", "steady-2"):
        assert "Traceback" not in workers[name].log(), workers[name].log()[-3000:]
