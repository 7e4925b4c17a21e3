"""The dashboard's data layer on both databases: task and audit pages walked to the end under
every filter (the text's % and _ taken literally), attempts and results in order, the overview's
buckets, depth and failure rate on the hand-moved clock, and queue depth sampling."""

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bloom.domain.errors import Invalid
from bloom.domain.history import Bucket, DepthSample
from bloom.domain.models import Completion, Lease
from bloom.domain.paging import Cursor, Page
from bloom.domain.states import LeaseStatus, ResultStatus, TaskStatus, WorkerStatus
from bloom.runtime.container import Container
from bloom.runtime.loops import PeriodicLoop
from bloom.runtime.services.history import HistoryService
from bloom.runtime.services.records import AuditFilter
from bloom.runtime.services.tasks import NewTask, TaskFilter
from bloom.runtime.services.workers import Registration
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe

HOUR = 3_600_000
MINUTE = 60_000
T0 = 499_999 * HOUR
"""A whole hour (so a whole minute): buckets start on it."""

PROMPTS = ("Fix 100% of bugs", "fix 1000 bugs", "under_score job", "underXscore job", "Plain a/b")


async def add_worker(
    container: Container, name: str, status: WorkerStatus = WorkerStatus.ONLINE
) -> None:
    capabilities = {"claude_cli": True, "max_concurrency": 50, "labels": []}
    await container.workers.register(
        Registration(name=name, status=status, capabilities=capabilities)
    )


async def add_task(container: Container, context_id: str = "c", agent: str = "a", **kw: Any) -> str:
    task, _ = await container.tasks.create(
        NewTask(context_id=context_id, agent_slug=agent, prompt=kw.pop("prompt", "p"), **kw)
    )
    return task.id


async def lease(container: Container, task_id: str, worker_id: str = "w1") -> Lease:
    granted, _ = await container.leases.lease(task_id, worker_id=worker_id)
    return granted


async def finish(container: Container, task_id: str, code: str | None = None) -> None:
    """Complete the task's current attempt: a success, or a failure with `code`."""
    completion = Completion(
        status=ResultStatus.SUCCESS if code is None else ResultStatus.ERROR,
        output="done" if code is None else None,
        error_message=None if code is None else "it broke",
        metrics={},
        error_code=code,
    )
    await container.attempts.complete(task_id, completion)


async def walk(fetch: Callable[[Cursor | None], Awaitable[Page[Any]]]) -> list[list[str]]:
    """Every page's ids, following `next` through its text form as a browser would."""
    pages: list[list[str]] = []
    after = None
    while True:
        page = await fetch(after)
        pages.append([item.id for item in page.items])
        if page.next is None:
            return pages
        after = Cursor.decode(page.next.encode())
        assert after == page.next
        assert len(pages) < 100


def chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)] or [[]]


@pytest.fixture
async def thirty(container: Container, clock: FakeClock) -> list[str]:
    """30 tasks over 3 contexts and 2 agents, some created in the same millisecond; tasks 0, 3,
    6… leased to w1 and 1, 4, 7, 10, 13 to w2; of w1's, every other one completed, the rest
    failed; tasks 5, 19 and 26 cancelled while queued; tasks 2, 8, 14, 20 and 26 for codex."""
    clock.now = T0
    await add_worker(container, "w1")
    await add_worker(container, "w2")
    ids = []
    for i in range(30):
        if i % 4 != 1:  # 1, 5, 9… share the millisecond of the task before them
            clock.advance(1)
        ids.append(
            await add_task(
                container,
                context_id=f"c{i % 3}",
                agent="alpha" if i % 2 else "beta",
                prompt=f"{PROMPTS[i % 5]} #{i}",
                cli="codex" if i % 6 == 2 else "claude",
            )
        )
    clock.advance(1)
    for i, task_id in enumerate(ids):
        if i % 3 == 0:
            await lease(container, task_id, "w1")
            await finish(container, task_id, None if i % 6 == 0 else "fatal")
        elif i % 3 == 1 and i < 15:
            await lease(container, task_id, "w2")
        elif i % 7 == 5:
            await container.tasks.cancel(task_id)
    return ids


def expected_tasks(probe: DatabaseProbe, keep: Callable[[dict[str, Any]], bool]) -> list[str]:
    rows = sorted(probe.tasks(), key=lambda r: (r["created_at"], r["id"]), reverse=True)
    return [row["id"] for row in rows if keep(row)]


def text_matches(text: str) -> Callable[[dict[str, Any]], bool]:
    def keep(row: dict[str, Any]) -> bool:
        needle = text.lower()
        return needle in row["prompt"].lower() or needle in row["id"].lower()

    return keep


async def test_task_pages_walk_every_filter_newest_first(
    container: Container, probe: DatabaseProbe, thirty: list[str]
) -> None:
    async def pages(task_filter: TaskFilter, limit: int = 2) -> list[list[str]]:
        return await walk(lambda after: container.tasks.page(task_filter, after=after, limit=limit))

    everything = expected_tasks(probe, lambda row: True)
    assert len(everything) == 30
    assert len(set(everything)) == 30
    assert await pages(TaskFilter(), limit=4) == chunks(everything, 4)  # 8 pages, the last of 2
    assert await pages(TaskFilter(), limit=30) == [everything]
    assert await pages(TaskFilter(), limit=29) == [everything[:29], everything[29:]]

    cases: list[tuple[TaskFilter, Callable[[dict[str, Any]], bool], int]] = [
        (TaskFilter(status=TaskStatus.QUEUED), lambda r: r["status"] == "queued", 12),
        (TaskFilter(status=TaskStatus.COMPLETED), lambda r: r["status"] == "completed", 5),
        (TaskFilter(status=TaskStatus.LEASED), lambda r: r["status"] == "leased", 5),
        (TaskFilter(status=TaskStatus.CANCELLED), lambda r: r["status"] == "cancelled", 3),
        (TaskFilter(worker_id="w1"), lambda r: r["worker_id"] == "w1", 10),
        (TaskFilter(worker_id="w2"), lambda r: r["worker_id"] == "w2", 5),
        (TaskFilter(context_id="c1"), lambda r: r["context_id"] == "c1", 10),
        (TaskFilter(agent_slug="alpha"), lambda r: r["agent_slug"] == "alpha", 15),
        (TaskFilter(cli="codex"), lambda r: r["cli"] == "codex", 5),
        (TaskFilter(cli="claude"), lambda r: r["cli"] == "claude", 25),
        (TaskFilter(cli="gemini"), lambda r: False, 0),
        (
            TaskFilter(cli="codex", status=TaskStatus.QUEUED),
            lambda r: (r["cli"], r["status"]) == ("codex", "queued"),
            4,
        ),
        (TaskFilter(text="100%"), text_matches("100%"), 6),  # not "1000"
        (TaskFilter(text="%"), text_matches("%"), 6),
        (TaskFilter(text="UNDER_SCORE"), text_matches("under_score"), 6),  # not "underXscore"
        (TaskFilter(text="_"), text_matches("_"), 6),
        (TaskFilter(text="a/b"), text_matches("a/b"), 6),
        (TaskFilter(text="#2"), text_matches("#2"), 11),  # 2, 20…29
        (TaskFilter(text=thirty[17][:30].upper()), lambda r: r["id"] == thirty[17], 1),
        (TaskFilter(text=thirty[17][-8:]), lambda r: r["id"] == thirty[17], 1),  # a short id
        (TaskFilter(text="nowhere"), lambda r: False, 0),
        (
            TaskFilter(status=TaskStatus.QUEUED, agent_slug="alpha", text="job"),
            lambda r: (
                r["status"] == "queued" and r["agent_slug"] == "alpha" and "job" in r["prompt"]
            ),
            2,
        ),
        (
            TaskFilter(worker_id="w1", context_id="c0", status=TaskStatus.FAILED),
            lambda r: (r["worker_id"], r["context_id"], r["status"]) == ("w1", "c0", "failed"),
            5,
        ),
    ]
    for task_filter, keep, count in cases:
        want = expected_tasks(probe, keep)
        assert len(want) == count, task_filter
        assert await pages(task_filter) == chunks(want, 2), task_filter


async def test_a_search_reads_a_window_per_page_and_goes_on_after_it(
    container: Container, probe: DatabaseProbe, thirty: list[str]
) -> None:
    """Under several filters or a text, a page searches the next `search_window` tasks (newest
    first) and no more: it may hold fewer than its limit, or none, and still name where the
    search goes on; walked to the end, the pages hold every match once, newest first. A single
    filter's pages are not windowed (its index holds only matches)."""
    container.tasks.search_window = 4
    rows = {row["id"]: row for row in probe.tasks()}
    cases: list[tuple[TaskFilter, Callable[[dict[str, Any]], bool]]] = [
        (TaskFilter(text="job"), text_matches("job")),
        (TaskFilter(text="nowhere"), lambda r: False),
        (
            TaskFilter(status=TaskStatus.QUEUED, agent_slug="alpha"),
            lambda r: (r["status"], r["agent_slug"]) == ("queued", "alpha"),
        ),
        (
            TaskFilter(worker_id="w1", status=TaskStatus.FAILED),
            lambda r: (r["worker_id"], r["status"]) == ("w1", "failed"),
        ),
    ]
    for window, (task_filter, keep) in itertools.product((1, 4), cases):  # 1: each its own ms
        container.tasks.search_window = window

        async def fetch(after: Cursor | None, chosen: TaskFilter = task_filter) -> Page[Any]:
            return await container.tasks.page(chosen, after=after, limit=2)

        want = expected_tasks(probe, keep)
        walked = await walk(fetch)
        assert [task for page in walked for task in page] == want, (window, task_filter)
        assert all(len(page) <= 2 for page in walked)
    # 30 tasks, windows of 4 (and the rest of their last millisecond): nothing found, in at
    # most 8 pages; the first stops at the 4th newest task's millisecond, after its oldest task
    nowhere = await walk(
        lambda after: container.tasks.page(TaskFilter(text="nowhere"), after=after, limit=2)
    )
    assert 4 <= len(nowhere) <= 8
    assert all(page == [] for page in nowhere)
    stopped = await container.tasks.page(TaskFilter(text="nowhere"), after=None, limit=2)
    everything = expected_tasks(probe, lambda row: True)
    fourth_ms = rows[everything[3]]["created_at"]
    same_ms = [task for task in everything if rows[task]["created_at"] == fourth_ms]
    assert stopped.next == Cursor(fourth_ms, min(same_ms))
    unwindowed = await container.tasks.page(
        TaskFilter(status=TaskStatus.FAILED), after=None, limit=2
    )
    assert len(unwindowed.items) == 2


async def test_a_page_after_a_cursor_starts_strictly_after_it(
    container: Container, probe: DatabaseProbe, thirty: list[str]
) -> None:
    everything = expected_tasks(probe, lambda row: True)
    rows = {row["id"]: row for row in probe.tasks()}
    tenth = rows[everything[9]]
    page = await container.tasks.page(
        TaskFilter(), after=Cursor(tenth["created_at"], tenth["id"]), limit=5
    )
    assert [task.id for task in page.items] == everything[10:15]
    assert page.next == Cursor(rows[everything[14]]["created_at"], everything[14])
    oldest = rows[everything[-1]]
    past_the_end = Cursor(oldest["created_at"], oldest["id"])
    assert await container.tasks.page(TaskFilter(), after=past_the_end, limit=5) == Page([], None)
    for limit in (0, -1, 501):
        with pytest.raises(Invalid):
            await container.tasks.page(TaskFilter(), after=None, limit=limit)


async def test_counts_name_every_status(container: Container, thirty: list[str]) -> None:
    assert await container.tasks.counts() == {
        "queued": 12,
        "leased": 5,
        "running": 0,
        "completed": 5,
        "failed": 5,
        "dead": 0,
        "cancelled": 3,
        "awaiting_approval": 0,
        "blocked": 0,
    }


def expected_audit(probe: DatabaseProbe, keep: Callable[[dict[str, Any]], bool]) -> list[str]:
    rows = sorted(probe.audit(), key=lambda r: (r["timestamp"], r["id"]), reverse=True)
    return [row["id"] for row in rows if keep(row)]


async def test_audit_pages_walk_every_filter(
    container: Container, probe: DatabaseProbe, thirty: list[str]
) -> None:
    async def pages(audit_filter: AuditFilter) -> list[list[str]]:
        return await walk(
            lambda after: container.records.audit_page(audit_filter, after=after, limit=3)
        )

    first = thirty[0]  # leased to w1 and completed
    [first_lease] = await container.records.attempts(first)
    cases: list[tuple[AuditFilter, Callable[[dict[str, Any]], bool], int]] = [
        # workers registered, tasks created, leased, ended (completed or failed), cancelled
        (AuditFilter(), lambda r: True, 2 + 30 + 15 + 10 + 3),
        (AuditFilter(action="task_leased"), lambda r: r["action"] == "task_leased", 15),
        (AuditFilter(entity_type="lease"), lambda r: r["entity_type"] == "lease", 15),
        (AuditFilter(entity_type="worker"), lambda r: r["entity_type"] == "worker", 2),
        (AuditFilter(actor="w1"), lambda r: r["actor"] == "w1", 10),
        (AuditFilter(entity_id=first), lambda r: first in (r["entity_id"], r["task_id"]), 3),
        (AuditFilter(entity_id=first_lease.id), lambda r: r["entity_id"] == first_lease.id, 1),
        (
            AuditFilter(action="task_completed", entity_id=first),
            lambda r: r["action"] == "task_completed" and r["task_id"] == first,
            1,
        ),
        (
            AuditFilter(action="task_created", entity_type="llm_task", actor="api"),
            lambda r: (
                (r["action"], r["entity_type"], r["actor"]) == ("task_created", "llm_task", "api")
            ),
            30,
        ),
        (AuditFilter(actor="nobody"), lambda r: False, 0),
    ]
    for audit_filter, keep, count in cases:
        want = expected_audit(probe, keep)
        assert len(want) == count, audit_filter
        assert await pages(audit_filter) == chunks(want, 3), audit_filter
    with pytest.raises(Invalid):
        await container.records.audit_page(AuditFilter(), after=None, limit=0)


async def test_attempts_and_results_oldest_first(container: Container, clock: FakeClock) -> None:
    clock.now = T0
    await add_worker(container, "w1")
    await add_worker(container, "w2")
    task_id = await add_task(container)
    other = await add_task(container)
    first = await lease(container, task_id, "w1")
    clock.advance(1)
    await finish(container, task_id, "error")  # retried: queued again
    clock.advance(30)
    second = await lease(container, task_id, "w2")
    await lease(container, other, "w1")
    clock.advance(2)
    await finish(container, task_id)

    attempts = await container.records.attempts(task_id)
    assert [(a.id, a.worker_id, a.status) for a in attempts] == [
        (first.id, "w1", LeaseStatus.RELEASED),
        (second.id, "w2", LeaseStatus.RELEASED),
    ]
    assert [a.started_at for a in attempts] == [T0, T0 + 31_000]
    results = await container.records.results(task_id)
    assert [(r.lease_id, r.status, r.completed_at) for r in results] == [
        (first.id, ResultStatus.ERROR, T0 + 1_000),
        (second.id, ResultStatus.SUCCESS, T0 + 33_000),
    ]
    assert await container.records.results(other) == []
    assert await container.records.attempts("no-such-task") == []
    assert await container.records.results("no-such-task") == []


async def test_overview_counts_buckets_depth_and_failure_rate(
    container: Container, clock: FakeClock
) -> None:
    history = container.history
    clock.now = T0 - 120_000
    await add_worker(container, "w1")
    await add_worker(container, "w2", status=WorkerStatus.OFFLINE)
    a = await add_task(container)
    await history.sample()  # minute T0 - 2 min: 1 queued
    await lease(container, a)
    clock.now = T0 - 10_000
    await finish(container, a)  # before the 5-minute window, inside the 10-minute one

    clock.now = T0 + 1_000
    b, c, d, e, f, g = [await add_task(container) for _ in range(6)]
    clock.now = T0 + 2_000
    await lease(container, b)
    await lease(container, c)
    clock.now = T0 + 5_000
    await finish(container, b)
    clock.now = T0 + 20_000
    await finish(container, c, "fatal")
    clock.now = T0 + 30_000
    await history.sample()  # minute T0: d, e, f, g queued
    clock.now = T0 + 125_000
    await lease(container, d)
    await lease(container, e)
    clock.now = T0 + 130_000
    await finish(container, d)
    clock.now = T0 + 150_000
    await finish(container, e)
    clock.now = T0 + 185_000
    await history.sample()  # minute T0 + 3 min: f, g queued
    clock.now = T0 + 245_000
    await lease(container, f)
    clock.now = T0 + 250_000
    await finish(container, f, "error")  # queued again for a retry
    clock.now = T0 + 270_000
    await lease(container, g)

    five = await history.overview(window_ms=5 * MINUTE, bucket_ms=MINUTE)
    assert five.counts == {
        "queued": 1,
        "leased": 1,
        "running": 0,
        "completed": 4,
        "failed": 1,
        "dead": 0,
        "cancelled": 0,
        "awaiting_approval": 0,
        "blocked": 0,
    }
    assert (five.workers_total, five.workers_online, five.active_leases) == (2, 1, 1)
    assert five.oldest_queued_at == T0 + 1_000  # f's creation, not its requeue
    assert (five.window_ms, five.bucket_ms) == (5 * MINUTE, MINUTE)
    assert five.throughput == [
        Bucket(T0, 1, 1),
        Bucket(T0 + MINUTE, 0, 0),
        Bucket(T0 + 2 * MINUTE, 2, 0),
        Bucket(T0 + 3 * MINUTE, 0, 0),
        Bucket(T0 + 4 * MINUTE, 0, 1),
    ]
    assert five.depth == [DepthSample(T0, 4, 0), DepthSample(T0 + 3 * MINUTE, 2, 0)]
    assert five.failure_rate == pytest.approx(2 / 5)

    ten = await history.overview(window_ms=10 * MINUTE, bucket_ms=MINUTE)
    assert [bucket.start for bucket in ten.throughput] == [T0 + i * MINUTE for i in range(-5, 5)]
    assert [(b.succeeded, b.failed) for b in ten.throughput] == [
        (0, 0),
        (0, 0),
        (0, 0),
        (0, 0),
        (1, 0),  # a, at T0 - 10 s
        (1, 1),
        (0, 0),
        (2, 0),
        (0, 0),
        (0, 1),
    ]
    assert ten.depth == [
        DepthSample(T0 - 2 * MINUTE, 1, 0),
        DepthSample(T0, 4, 0),
        DepthSample(T0 + 3 * MINUTE, 2, 0),
    ]
    assert ten.failure_rate == pytest.approx(2 / 6)

    uneven = await history.overview(window_ms=150_000, bucket_ms=MINUTE)  # 2.5 buckets: 3
    assert uneven.throughput == [
        Bucket(T0 + 2 * MINUTE, 2, 0),
        Bucket(T0 + 3 * MINUTE, 0, 0),
        Bucket(T0 + 4 * MINUTE, 0, 1),
    ]
    assert uneven.failure_rate == pytest.approx(1 / 3)
    clock.now = T0 + HOUR
    quiet = await history.overview(window_ms=5 * MINUTE, bucket_ms=MINUTE)
    assert quiet.throughput == [Bucket(T0 + HOUR - i * MINUTE, 0, 0) for i in range(4, -1, -1)]
    assert (quiet.depth, quiet.failure_rate) == ([], None)
    for window_ms, bucket_ms in ((MINUTE, 0), (0, MINUTE), (MINUTE, HOUR), (HOUR * 1000, 1000)):
        with pytest.raises(Invalid):
            await history.overview(window_ms=window_ms, bucket_ms=bucket_ms)


async def samples(container: Container) -> list[DepthSample]:
    async with container.db.read() as tx:
        return await tx.samples.between(0, 2**62)


async def test_sampling_keeps_the_minutes_first_sample_and_prunes_after_eight_days(
    container: Container, clock: FakeClock
) -> None:
    clock.now = T0 + 10_000
    await add_worker(container, "w1")
    first = await add_task(container)
    await add_task(container)
    await container.history.sample()
    await lease(container, first)
    clock.now = T0 + 59_999
    await container.history.sample()  # the same minute: the first sample stays
    assert await samples(container) == [DepthSample(T0, 2, 0)]

    clock.now = T0 + MINUTE
    rival = HistoryService(container.db, clock)  # another process, the same minute
    await asyncio.gather(container.history.sample(), rival.sample(), container.history.sample())
    assert await samples(container) == [DepthSample(T0, 2, 0), DepthSample(T0 + MINUTE, 1, 1)]

    clock.now = T0 + 8 * 24 * HOUR + 30_000  # the first sample is 8 days and 30 s old
    await container.history.sample()
    assert await samples(container) == [
        DepthSample(T0 + MINUTE, 1, 1),
        DepthSample(T0 + 8 * 24 * HOUR, 1, 1),
    ]
    clock.now = T0 + 8 * 24 * HOUR + MINUTE  # exactly 8 days after the second: kept
    await container.history.sample()
    assert [s.at for s in await samples(container)] == [
        T0 + MINUTE,
        T0 + 8 * 24 * HOUR,
        T0 + 8 * 24 * HOUR + MINUTE,
    ]


async def test_the_container_samples_the_queue_every_minute(container: Container) -> None:
    [loop] = [
        loop
        for loop in container.loops
        if isinstance(loop, PeriodicLoop) and loop.name == "queue-history"
    ]
    assert loop.interval_sec == 60
    assert loop.step == container.history.sample
