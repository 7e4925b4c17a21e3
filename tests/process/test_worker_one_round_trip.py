"""The real worker's path one round trip shorter (issue 31, item 2), with real processes: the
runtime, the echo model and `bloom worker run` running the pinned Claude CLI.

A context's next task starts from the complete of the one before (`claim_next`), without a new
claim; the run's last events travel with the complete; and kill -9 of the runtime in the middle
of that complete loses nothing: once the runtime is back, the task ends completed once, with
every event of its run, or runs again; never completed with events missing, never twice.
"""

import contextlib
import re
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from bloom.db.database import resolve_database
from bloom.runtime.storage.tables import task_events
from tests.process.test_worker_e2e import working_in
from tests.support.db import DatabaseProbe
from tests.support.stack import Stack, wait_for

CLAIM_ROUTE = "/api/runtime/workers/{worker_id}/claim"


def claims_answered(stack: Stack) -> dict[str, float]:
    """The runtime's claim requests answered so far, by status (its /metrics)."""
    scrape = httpx.get(stack.runtime.url + "/metrics", headers=stack.headers, timeout=10).text
    found: dict[str, float] = {}
    for line in scrape.splitlines():
        if line.startswith("bloom_http_requests_total{") and f'route="{CLAIM_ROUTE}"' in line:
            status = re.search(r'status="(\d+)"', line)
            assert status is not None
            found[status.group(1)] = found.get(status.group(1), 0) + float(line.split()[-1])
    return found


def events_of(probe: DatabaseProbe, task_id: str) -> list[dict[str, Any]]:
    where = task_events.c.task_id == task_id
    return probe.rows(select(task_events).where(where).order_by(task_events.c.seq))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_contexts_next_task_starts_from_the_complete_without_a_new_claim(
    stack: Stack, probe: DatabaseProbe
) -> None:
    stack.add_worker("w1")
    first = stack.submit("remember the word harbour [[sleep 2]]", context_id="ctx-next")
    stack.wait(first, {"running"}, timeout=30)
    second = stack.submit("what was the word?", context_id="ctx-next")  # waits: no free slot
    done = stack.wait(second, timeout=60)
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert stack.task(first)["status"] == "completed"
    assert done["worker_id"] == "w1"
    assert done["session_id"] == stack.task(first)["session_id"]  # the conversation resumed
    assert stack.output(second) == "echo: what was the word?"

    # Only the first task came through a claim: the second was granted by the first's complete
    # (its `claim_next`), with no long poll between the two.
    (lease_a,) = probe.leases_of(first)
    (lease_b,) = probe.leases_of(second)
    assert claims_answered(stack).get("200") == 1, claims_answered(stack)
    assert 0 <= lease_b["started_at"] - lease_a["ended_at"] < 1000

    # each run's events are whole, its `finished` last (it travelled with the complete)
    for task_id, lease in ((first, lease_a), (second, lease_b)):
        rows = events_of(probe, task_id)
        assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
        kinds = [row["type"] for row in rows]
        assert (kinds[0], kinds[-1]) == ("started", "finished"), kinds
        assert "claude" in kinds
        assert kinds.count("finished") == 1
        assert {row["lease_id"] for row in rows} == {lease["id"]}
        claude = [row["data"] for row in rows if row["type"] == "claude"]
        runs = [event["type"] for event in claude].count("result")
        assert runs == 1, [row["data"] for row in rows]  # each event once (worker.outbox)


@contextlib.contextmanager
def completes_held(database_url: str, data_dir: Path) -> Iterator[None]:
    """Hold the database so that a complete stops in the middle: on PostgreSQL a lock on the
    results table (the complete's lease, task and events are written, its result row waits, the
    transaction open); on SQLite the write lock (the complete waits for its transaction)."""
    target = resolve_database(database_url, data_dir)
    if target.sync_url.get_backend_name() == "sqlite":
        held = sqlite3.connect(str(target.sync_url.database), isolation_level=None, timeout=30)
        held.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            held.execute("ROLLBACK")
            held.close()
        return
    engine = create_engine(target.sync_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE llm_results IN SHARE MODE"))
            try:
                yield
            finally:
                conn.rollback()
    finally:
        engine.dispose()


def waiting_on_results(database_url: str, data_dir: Path) -> bool:
    """PostgreSQL: some transaction waits for a lock on the results table."""
    engine = create_engine(resolve_database(database_url, data_dir).sync_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            waiting = conn.execute(text(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE NOT l.granted AND c.relname = 'llm_results'"
            )).scalar_one()  # fmt: skip
    finally:
        engine.dispose()
    return bool(waiting)


def test_kill_9_of_the_runtime_during_a_complete_with_events_loses_nothing(
    stack: Stack, probe: DatabaseProbe, database_url: str, tmp_path: Path
) -> None:
    worker = stack.add_worker("w1", BLOOM_WORKER_COMPLETE_DEADLINE_SEC="120")
    task_id = stack.submit("keep this answer [[sleep 2]]")
    stack.wait(task_id, {"running"}, timeout=30)
    task_dir = worker.work_dir / "tasks" / task_id
    postgres = not database_url.startswith("sqlite")
    with completes_held(database_url, tmp_path):
        wait_for(lambda: working_in(task_dir), 10, "the CLI to start")
        wait_for(lambda: not working_in(task_dir), 30, "the CLI to end")
        if postgres:  # the complete's transaction has written its events and waits
            wait_for(lambda: waiting_on_results(database_url, tmp_path), 20, "the complete")
        else:
            time.sleep(1.0)  # the complete waits for the write lock
        stack.runtime.kill(signal.SIGKILL)
    assert probe.leases_of(task_id)[-1]["status"] == "active"  # nothing of the complete kept
    stack.runtime.start()

    done = stack.wait(task_id, timeout=120)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert "complete_retry" in worker.log()  # the complete was cut off, and sent again
    results = [r for r in probe.results() if r["task_id"] == task_id]
    assert len(results) == 1  # completed once
    assert stack.output(task_id) == "echo: keep this answer [[sleep 2]]"
    released = [lease for lease in probe.leases_of(task_id) if lease["status"] == "released"]
    assert [lease["id"] for lease in released] == [results[0]["lease_id"]]

    rows = events_of(probe, task_id)
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))  # no gap, no repeat
    mine = [row for row in rows if row["lease_id"] == results[0]["lease_id"]]
    kinds = [row["type"] for row in mine]
    assert (kinds[0], kinds[-1]) == ("started", "finished"), kinds
    assert kinds.count("finished") == 1
    assert kinds.count("started") == 1
    claude = [row["data"]["type"] for row in mine if row["type"] == "claude"]
    assert claude.count("result") == 1  # the run's output whole, stored once
    assert mine[-1]["data"]["status"] == "success"
