"""An S3 outage in the middle of a real run (workers running the Claude CLI, artifacts in the
bucket): completes are refused while it lasts and retried by the workers, nothing is completed
without a readable artifact, nothing is lost or done twice, and work resumes when S3 is back."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bloom.runtime.storage.tables import llm_results
from tests.support.db import DatabaseProbe
from tests.support.s3 import Bucket, TcpProxy
from tests.support.stack import Stack

TASKS = 12


@pytest.fixture
def stack(
    database_url: str, tmp_path: Path, claude: Path, s3_bucket: Bucket, s3_proxy: TcpProxy
) -> Iterator[Stack]:
    env = Bucket(s3_proxy.url, s3_bucket.name).env(
        BLOOM_ARTIFACT_STORE="s3", BLOOM_S3_TIMEOUT_SEC="1"
    )
    built = Stack(database_url, tmp_path, claude, **env)
    try:
        built.start()
        yield built
    finally:
        built.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_work_survives_an_s3_outage(stack: Stack, s3_proxy: TcpProxy, probe: DatabaseProbe) -> None:
    for name in ("w1", "w2"):
        stack.add_worker(name, BLOOM_WORKER_CONCURRENCY="2")
    ids = [stack.submit(f"[[sleep 0.5]] job {i}") for i in range(TASKS)]
    stack.wait(ids[0], timeout=120)
    s3_proxy.cut()
    time.sleep(6)  # the store is down while tasks finish
    s3_proxy.restore()
    for i, task_id in enumerate(ids):
        task = stack.wait(task_id, timeout=180)
        assert task["status"] == "completed", (task, stack.logs()[-3000:])
        assert stack.output(task_id) == f"echo: [[sleep 0.5]] job {i}"  # its artifact reads back
    results = probe.rows(select(llm_results.c.task_id, llm_results.c.status))
    assert sorted(row["task_id"] for row in results) == sorted(ids)  # one result each
    log = stack.runtime.log()
    # Completes were refused meanwhile (503, Retry-After), and every task completed since: the
    # worker's client waited them out and tried again.
    assert "artifact_store_unavailable" in log
    # The workers renewed their leases while their completes were refused: none lapsed, so no
    # task ran twice (a lapsed lease's complete is refused with 409).
    workers = "".join(worker.log() for worker in stack.workers.values())
    assert "complete_refused" not in workers, workers[-3000:]
