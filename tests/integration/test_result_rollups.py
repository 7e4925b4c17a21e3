"""The results' rollups (`usage_days`, `result_minutes` and `result_quarters`, kept by migration
0019's triggers) on both databases: equal to a full scan of the results per day, project and
agent CLI, per minute and per quarter of an hour after a seeded random mix of everything that
writes a result (and of results updated and deleted by hand, which no path of the runtime does),
after completes racing each other, and after a bulk fill; and what the overview shows (its cost
today, its throughput) is them, the same figures as the scans it replaced."""

import asyncio
import random
import re
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import case, delete, func, select, text, update

from bloom.db.database import resolve_database
from bloom.domain.clis import CLIS
from bloom.domain.errors import ServiceError
from bloom.domain.history import MINUTE_MS, Window
from bloom.domain.models import Completion
from bloom.domain.usage import DAY_MS, UsageGroup, start_of_day
from bloom.runtime.container import Container
from bloom.runtime.dashboard.present import usd
from bloom.runtime.services.attempts import Ending
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage import bulk_history
from bloom.runtime.storage.tables import (
    USAGE_DAY_SUMS,
    leases,
    llm_results,
    llm_tasks,
    result_minutes,
    result_quarters,
    usage_days,
)
from tests.integration.test_task_counts import OUTCOMES, Mix, completion
from tests.support.clock import FakeClock
from tests.support.db import DatabaseProbe

res, tsk, ud = llm_results, llm_tasks, usage_days
SPANS = {MINUTE_MS: result_minutes, 15 * MINUTE_MS: result_quarters}
WORKERS = {"w0": 1, "w1": 2, "w2": 4}
PROJECTS = ("a", "b", "c")
WINDOWS = (
    (3_600_000, MINUTE_MS),  # the overview's: an hour in minutes (read per minute)
    (86_400_000, 15 * MINUTE_MS),  # and a day in quarters of an hour (read per quarter)
    (21_600_000, 3_600_000),  # hours: read per quarter
    (600_000, 90_000),  # not whole minutes: counted from the results
)

Sums = dict[tuple[Any, ...], tuple[Any, ...]]


def _succeeded(status: Any) -> Any:
    return func.sum(case((status == "success", 1), else_=0))


def _failed(status: Any) -> Any:
    return func.sum(case((status == "success", 0), else_=1))


def scanned_days(probe: DatabaseProbe) -> Sums:
    """Every result, joined to its task, summed per (UTC day, project, CLI)."""
    day = res.c.completed_at - res.c.completed_at % DAY_MS
    sums = [func.coalesce(func.sum(res.c[name]), 0) for name in USAGE_DAY_SUMS[3:]]
    stmt = (
        select(day, tsk.c.agent_slug, tsk.c.cli, func.count())
        .add_columns(_succeeded(res.c.status), _failed(res.c.status), *sums)
        .select_from(res.join(tsk, tsk.c.id == res.c.task_id))
        .group_by(day, tsk.c.agent_slug, tsk.c.cli)
    )
    with probe.engine.connect() as conn:
        return {tuple(row[:3]): _numbers(row[3:]) for row in conn.execute(stmt)}


def kept_days(probe: DatabaseProbe) -> Sums:
    """The rollup summed over its slots; groups whose results were all deleted (no attempt
    left) sum to nothing and are left out."""
    stmt = select(ud.c.day, ud.c.project, ud.c.cli).add_columns(
        *(func.sum(ud.c[name]) for name in USAGE_DAY_SUMS)
    )
    stmt = stmt.group_by(ud.c.day, ud.c.project, ud.c.cli)
    with probe.engine.connect() as conn:
        kept = {tuple(row[:3]): _numbers(row[3:]) for row in conn.execute(stmt)}
    emptied = {key: sums for key, sums in kept.items() if sums[0] == 0}
    for sums in emptied.values():
        assert sums == pytest.approx((0,) * len(USAGE_DAY_SUMS), abs=1e-9)
    return {key: sums for key, sums in kept.items() if key not in emptied}


def scanned_spans(probe: DatabaseProbe, span_ms: int) -> Sums:
    """Every result counted per span of `span_ms` (a minute, a quarter of an hour)."""
    start = res.c.completed_at - res.c.completed_at % span_ms
    stmt = select(start, _succeeded(res.c.status), _failed(res.c.status)).group_by(start)
    with probe.engine.connect() as conn:
        return {(row[0],): _numbers(row[1:]) for row in conn.execute(stmt)}


def kept_spans(probe: DatabaseProbe, span_ms: int) -> Sums:
    counted = SPANS[span_ms]
    stmt = select(counted.c.start, func.sum(counted.c.succeeded), func.sum(counted.c.failed))
    with probe.engine.connect() as conn:
        rows = conn.execute(stmt.group_by(counted.c.start))
        return {(row[0],): _numbers(row[1:]) for row in rows if row[1] or row[2]}


def _numbers(row: Any) -> tuple[Any, ...]:
    return tuple(float(n) if isinstance(n, float) else int(n) for n in row)


def assert_same_sums(kept: Sums, scanned: Sums) -> None:
    assert sorted(kept) == sorted(scanned)
    for key, sums in scanned.items():
        assert kept[key] == pytest.approx(sums, abs=1e-9), key  # costs summed in other orders


async def assert_rollups_agree(container: Container, probe: DatabaseProbe) -> None:
    """The rollups equal a full scan of the results, and the overview's reads of them equal
    the scans they replaced: today's cost per project and per CLI and its total, and the
    throughput of both windows."""
    assert_same_sums(kept_days(probe), scanned_days(probe))
    for span_ms in SPANS:
        assert_same_sums(kept_spans(probe, span_ms), scanned_spans(probe, span_ms))
    usage = container.usage
    for group in (UsageGroup.PROJECT, UsageGroup.CLI):
        kept, scanned = await usage.today(group), await usage.report(group)
        assert kept.day == scanned.first
        listed = {row.key: _day_figures(asdict(row)) for row in kept.groups}
        assert listed == {row.key: _day_figures(asdict(row)) for row in scanned.groups}
        assert _day_figures(asdict(kept.total)) == _day_figures(asdict(scanned.total))
        order = [(-row.cost_usd, -row.attempts, row.key) for row in kept.groups]
        assert order == sorted(order)  # the costliest first
    for window_ms, bucket_ms in WINDOWS:
        overview = await container.history.overview(window_ms=window_ms, bucket_ms=bucket_ms)
        window = Window.ending_at(
            container.history.clock(), window_ms=window_ms, bucket_ms=bucket_ms
        )
        async with container.db.read() as tx:
            counted = await tx.results.throughput(
                first=window.first, end=window.end, bucket_ms=bucket_ms
            )
        assert overview.throughput == window.fill(counted)


def _day_figures(sums: dict[str, Any]) -> dict[str, Any]:
    """A usage row's figures a day's rollup keeps (all but the distinct tasks), its cost
    rounded past a sum's last bits."""
    figures = {name: sums[name] for name in USAGE_DAY_SUMS}
    figures["cost_usd"] = round(figures["cost_usd"], 9)
    return figures


def costly(outcome: str, rng: random.Random) -> Completion:
    """An attempt's end with usage, as a worker reports it (now and then a figure missing)."""
    figures: dict[str, Any] = {
        "cost_usd": round(rng.uniform(0, 0.2), 6),
        "input_tokens": rng.randrange(5_000),
        "output_tokens": rng.randrange(2_000),
        "tokens_used": rng.randrange(7_000),
        "num_turns": rng.randrange(1, 9),
        "duration_ms": rng.randrange(100, 90_000),
        "model": rng.choice(["m1", "m2"]),
    }
    for name in list(figures):
        if rng.random() < 0.15:
            del figures[name]
    return replace(completion(outcome), metrics=figures)


class UsageMix(Mix):
    """The counting test's mix, its tasks over three projects and the three agent CLIs, its
    attempts costing something; a task deleted by hand goes with its results."""

    def completion(self, outcome: str) -> Completion:
        return costly(outcome, self.rng)

    def new_task(self) -> NewTask:
        task = super().new_task()
        if task.idempotency_key is not None:  # a replay's request is the same each time
            return replace(task, cli=CLIS[int(task.idempotency_key.split("-")[1]) % len(CLIS)])
        return replace(task, agent_slug=self.rng.choice(PROJECTS), cli=self.rng.choice(CLIS))

    async def delete(self) -> None:
        if not self.tasks:
            return
        task_id = self.tasks.pop(self.rng.randrange(len(self.tasks)))
        with self.probe.engine.begin() as conn:
            conn.execute(delete(res).where(res.c.task_id == task_id))
            conn.execute(delete(leases).where(leases.c.task_id == task_id))
            conn.execute(delete(tsk).where(tsk.c.id == task_id))
        self.leases = {lease: task for lease, task in self.leases.items() if task != task_id}

    async def reap(self) -> None:
        """Expiries, the clock moved less far than the counting mix does (an expired lease
        writes no result: this mix wants results)."""
        self.clock.advance(self.rng.choice([31, 91, 301]))
        await self.container.reaper.reap_once()

    async def end_one(self) -> None:
        """One of the attempts in flight ended, beside the mix's own ends."""
        active = self.probe.active_leases()
        if not active:
            return
        lease = self.rng.choice(sorted(active, key=lambda row: row["id"]))
        end = self.completion(self.rng.choice(OUTCOMES))
        try:
            await self.container.attempts.complete(lease["task_id"], end, lease_id=lease["id"])
        except ServiceError:
            self.refused += 1

    def by_hand(self) -> str:
        """A result deleted, or its counted figures changed (another status, cost and tokens,
        a time two days earlier): what an operator's SQL could do."""
        with self.probe.engine.begin() as conn:
            ids = sorted(conn.execute(select(res.c.id)).scalars())
            if not ids:
                return "none"
            chosen = self.rng.choice(ids)
            if self.rng.random() < 0.4:
                conn.execute(delete(res).where(res.c.id == chosen))
                return "deleted"
            changed = {
                "status": self.rng.choice(["success", "error"]),
                "cost_usd": self.rng.choice([None, 0.5]),
                "input_tokens": self.rng.randrange(100),
                "completed_at": res.c.completed_at - self.rng.choice([0, 2 * DAY_MS + 7_000]),
            }
            conn.execute(update(res).where(res.c.id == chosen).values(changed))
            conn.execute(update(res).where(res.c.id == chosen).values(worker_id="x"))  # uncounted
            return "updated"


async def register_workers(container: Container, slots: dict[str, int] = WORKERS) -> None:
    for name, n in slots.items():
        clis = dict.fromkeys(CLIS, "1.0.0")  # each CLI and its version
        capabilities = {"claude_cli": True, "max_concurrency": n, "labels": [], "clis": clis}
        await container.workers.register(Registration(name=name, capabilities=capabilities))


@pytest.mark.parametrize("seed", [1, 2])
async def test_rollups_equal_a_full_scan_after_a_random_mix(
    container: Container, clock: FakeClock, probe: DatabaseProbe, seed: int
) -> None:
    """Creates, claims, pushed leases, heartbeats, completes (alone and batched; successes,
    retried and final failures, with usage or without), cancels, requeues, expiries, tasks
    deleted with their results, results deleted or changed by hand, over a UTC midnight: the
    rollups equal a full scan at every checkpoint."""
    clock.now = start_of_day(clock.now) + DAY_MS - 20 * 60_000
    first_day = start_of_day(clock.now)
    await register_workers(container)
    mix = UsageMix(container, clock, probe, seed)
    by_hand: list[str] = []
    for step in range(1, 401):
        await mix.step()
        if mix.rng.random() < 0.4:
            await mix.end_one()
        if step % 20 == 0:
            clock.advance(61)
            by_hand.append(mix.by_hand())
        if step % 50 == 0:
            await assert_rollups_agree(container, probe)
    days = {key[0] for key in scanned_days(probe)}
    assert {first_day, first_day + DAY_MS} <= days, days  # the mix crossed midnight
    assert {"deleted", "updated"} <= set(by_hand), by_hand
    assert mix.done.get("delete"), mix.done
    assert {key[2] for key in scanned_days(probe)} == set(CLIS)
    assert len(kept_spans(probe, MINUTE_MS)) > 10
    assert probe.count(res) > 40, mix.done


async def test_rollups_hold_under_racing_completes(
    container: Container, probe: DatabaseProbe, database_url: str
) -> None:
    """Batched completes of several projects' tasks (each batch charges several projects and
    rolls into several day rows), duplicate ends and single ones racing each other, each on its
    own connection (PostgreSQL: concurrent transactions roll into different slots, and two in one
    slot one after the other; spend rows are locked in one order): no deadlock, and the sums
    agree."""
    workers = {f"w{i}": 4 for i in range(6)}
    await register_workers(container, workers)
    news = [
        NewTask(context_id=f"c{i}", agent_slug=PROJECTS[i % 3], prompt="p", cli=CLIS[i % 2])
        for i in range(len(workers) * 4)
    ]
    await asyncio.gather(*(container.tasks.create(new) for new in news))
    claims = [container.leases.claim(w, wait_sec=0) for w in workers for _ in range(4)]
    claimed = [grant for grant in await asyncio.gather(*claims) if grant is not None]
    assert len(claimed) == len(news)
    rng = random.Random(7)
    racing: list[Any] = []
    for worker in workers:
        mine = [g for g in claimed if g.lease.worker_id == worker]
        rng.shuffle(mine)
        endings = [
            Ending(g.task.id, costly(rng.choice(OUTCOMES), rng), g.lease.id) for g in mine[:3]
        ]
        racing.append(container.attempts.complete_many(endings, worker))
        for grant in mine[3:]:  # the same end twice at once: recorded once
            end = costly("success", rng)
            racing += [
                container.attempts.complete(grant.task.id, end, lease_id=grant.lease.id)
                for _ in range(2)
            ]
    outcomes = await asyncio.gather(*racing, return_exceptions=True)
    unexpected = [
        o for o in outcomes if isinstance(o, Exception) and not isinstance(o, ServiceError)
    ]
    assert not unexpected, [getattr(o, "detail", None) for o in unexpected]
    assert probe.count(res) == len(claimed)
    await assert_rollups_agree(container, probe)
    if database_url.startswith("postgresql"):
        slots = probe.scalar(select(func.count(func.distinct(result_minutes.c.slot))))
        assert slots > 1  # the completes' transactions rolled into several slots


def test_two_transactions_of_one_slot_roll_one_after_the_other(
    probe: DatabaseProbe, database_url: str
) -> None:
    """PostgreSQL: two transactions of one slot, each rolling results of two projects in
    opposite orders, never wait on each other's rollup rows: the second waits for the slot's
    `task_counts` row, which the first took before any rollup row (and holds until it commits),
    then rolls its own."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer")
    with probe.engine.begin() as conn:
        for task_id, project in (("ta", "a"), ("tb", "b")):
            conn.execute(
                text(
                    "INSERT INTO llm_tasks (id, context_id, agent_slug, prompt, context_hints, "
                    "policy, status, created_at, updated_at) "
                    "VALUES (:id, 'c', :p, 'x', '[]', '{}', 'running', 1, 1)"
                ),
                {"id": task_id, "p": project},
            )

    def add(conn: Any, result_id: str, task_id: str) -> None:
        conn.execute(
            text(
                "INSERT INTO llm_results (id, task_id, worker_id, status, metrics, completed_at, "
                "cost_usd) VALUES (:id, :t, 'w', 'success', '{}', 1000, 0.25)"
            ),
            {"id": result_id, "t": task_id},
        )

    first, second = probe.engine.connect(), probe.engine.connect()
    try:
        first.begin()
        slot = first.execute(text("SELECT txid_current() % 32")).scalar_one()
        second_pid = second.execute(text("SELECT pg_backend_pid()")).scalar_one()
        second.rollback()
        for _ in range(200):  # ids are consecutive: a few tries find one of the same slot
            second.begin()
            if second.execute(text("SELECT txid_current() % 32")).scalar_one() == slot:
                break
            second.rollback()
        add(first, "r1", "ta")
        add(first, "r2", "tb")
        first.execute(text("SET CONSTRAINTS rollups_on_result_insert IMMEDIATE"))  # rolled now
        add(second, "r3", "tb")
        add(second, "r4", "ta")
        committed = threading.Thread(target=second.commit)
        committed.start()
        waits = text(
            "SELECT relation::regclass::text FROM pg_locks WHERE pid = :pid AND locktype = 'tuple'"
        )
        waited: list[str] = []
        with probe.engine.connect() as watcher:
            for _ in range(100):
                waited = list(watcher.execute(waits, {"pid": second_pid}).scalars())
                if waited:
                    break
                time.sleep(0.05)
        assert waited == ["task_counts"]
        assert committed.is_alive()
        first.commit()
        committed.join(10)
        assert not committed.is_alive()
    finally:
        first.close()
        second.close()
    assert_same_sums(kept_days(probe), scanned_days(probe))
    assert kept_days(probe)[(0, "a", "claude")][:4] == (2, 2, 0, 0.5)


async def test_a_bulk_fill_is_rolled_up(
    container: Container, probe: DatabaseProbe, database_url: str, tmp_path: Path
) -> None:
    """`bloom bench --dashboard`'s fill inserts results by the thousand with PostgreSQL's
    rolling trigger off, then sums them in: the rollups agree as after any complete, and the
    trigger is back on for the next."""
    target = resolve_database(database_url, tmp_path)
    now = container.history.clock()
    assert bulk_history.fill_history(target, 300, now_ms=now) == 300
    assert probe.count(res) == 240
    await assert_rollups_agree(container, probe)
    await register_workers(container)
    await container.tasks.create(NewTask(context_id="c", agent_slug="a", prompt="p"))
    grant = await container.leases.claim("w0", wait_sec=0)  # the fill's or this one
    assert grant is not None
    await container.attempts.complete(
        grant.task.id, costly("success", random.Random(1)), lease_id=grant.lease.id
    )
    await assert_rollups_agree(container, probe)
    assert sum(sums[0] for sums in kept_days(probe).values()) == 241


async def test_the_overview_shows_the_kept_cost_and_throughput(
    client: httpx.AsyncClient, container: Container, probe: DatabaseProbe
) -> None:
    """The overview's cost tables and card, and its throughput chart, show what the rollups
    hold: the same figures the usage report scans for."""
    await register_workers(container)
    rng = random.Random(3)
    for i in range(9):
        new = NewTask(context_id=f"c{i}", agent_slug=PROJECTS[i % 3], prompt="p", cli=CLIS[i % 3])
        task, _ = await container.tasks.create(new)
        grant = await container.leases.claim("w2", wait_sec=0)
        assert grant is not None
        outcome = "success" if i % 4 else "fatal"
        await container.attempts.complete(task.id, costly(outcome, rng), lease_id=grant.lease.id)
    await assert_rollups_agree(container, probe)
    page = (await client.get("/")).text
    scanned = await container.usage.report(UsageGroup.PROJECT)
    assert re.search(rf'id="stat-cost">{re.escape(usd(scanned.total.cost_usd))}<', page)
    for table, group in (("cost-by-project", UsageGroup.PROJECT), ("cost-by-cli", UsageGroup.CLI)):
        shown = page[page.index(f'id="{table}"') :]
        shown = shown[: shown.index("</table>")]
        report = await container.usage.report(group)
        assert shown.count("<tr") == 1 + len(report.groups) == 4
        for row in report.groups:
            cells = f'{row.key}</a></td><td class="num">{usd(row.cost_usd)}</td>'
            assert f'{cells}<td class="num">{row.attempts}</td>' in shown
            assert f"{row.input_tokens:,} / {row.output_tokens:,}" in shown
    assert re.search(r"Attempts finished per interval: 6 succeeded, 3 failed", page)
