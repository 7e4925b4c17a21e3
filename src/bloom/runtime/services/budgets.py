"""Budgets per project: set, read and removed by admins (audited); each complete's cost charged
against its project inside the complete's transaction (a warning at 80 %, a hold on the
project's queued tasks once a window is spent); and the queue woken when a hold ends."""

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from bloom.db.availability import DatabaseUnavailable
from bloom.domain.audit import AuditAction, budget_audit
from bloom.domain.budget import (
    MAX_BUDGET_USD,
    Budget,
    Crossing,
    Spend,
    Window,
    crossings,
    held_until,
    reset_of,
    start_of_month,
    utc_minute,
)
from bloom.domain.clock import Clock
from bloom.domain.errors import Invalid, NotFound
from bloom.domain.models import Task
from bloom.domain.states import TaskStatus
from bloom.domain.usage import start_of_day
from bloom.runtime.services import metrics
from bloom.runtime.services.signals import QueueSignal
from bloom.runtime.storage.repositories import Repositories, RuntimeDatabase

log = structlog.get_logger(__name__)
RELEASE_RECHECK_SEC = 60.0
"""How often the release timer rereads the soonest hold's end (a hold another process set)."""


@dataclass(frozen=True, slots=True)
class BudgetView:
    """A budget as people read it: its limits, what was spent against them, and the hold."""

    project: str
    daily_usd: float | None
    monthly_usd: float | None
    spent_today_usd: float
    spent_month_usd: float
    held_until: int | None
    """While the project's queued tasks wait (epoch ms), else None."""
    daily_resets_at: int
    monthly_resets_at: int
    updated_at: int
    updated_by: str


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a queued task waits: its project's budget is spent until `until`."""

    project: str
    until: int
    reason: str = "budget_exhausted"


def hold_message(hold: Hold) -> str:
    until = utc_minute(hold.until)
    return f"Project '{hold.project}' has spent its budget: its tasks wait until {until}"


async def spend_of(tx: Repositories, project: str, now: int) -> Spend:
    return await tx.budgets.spend(project, today=start_of_day(now), month=start_of_month(now))


async def lock_spend(tx: Repositories, projects: set[str], now: int) -> None:
    """Lock today's spend rows of `projects` in one order (by name), first, in a transaction
    that charges several (a worker's batch of ends): two such transactions charging the same
    projects in other orders would each hold a row the other waits for (a deadlock)."""
    for project in sorted(projects):
        await tx.budgets.charge(project, start_of_day(now), 0.0)


async def charge(
    tx: Repositories, project: str, cost_usd: float | None, *, now: int, task_id: str
) -> list[Crossing]:
    """Add an attempt's cost to its project's spend; when the project has a budget, hold its
    tasks once a window is spent and audit the marks this charge passed (80 %, 100 %)."""
    if not cost_usd or cost_usd <= 0:
        return []
    await tx.budgets.charge(project, start_of_day(now), cost_usd)
    budget = await tx.budgets.get(project)
    if budget is None:
        return []
    after = await spend_of(tx, project, now)
    until = held_until(budget, after, now)
    if until is not None:
        await tx.budgets.hold(project, until, after)
    before = Spend(after.today - cost_usd, after.month - cost_usd)
    passed = crossings(budget, before, after)
    for crossing in passed:
        await tx.audit.add(
            budget_audit(
                AuditAction.BUDGET_EXHAUSTED if crossing.exhausted else AuditAction.BUDGET_WARNING,
                project,
                now=now,
                actor="runtime",
                detail=_crossing_detail(project, crossing, now),
                task_id=task_id,
            )
        )
    return passed


def _crossing_detail(project: str, crossing: Crossing, now: int) -> str:
    share = f"${crossing.spent:.4f} of its {crossing.window} ${crossing.limit:.2f}"
    if crossing.exhausted:
        reset = utc_minute(reset_of(crossing.window, now))
        return f"Project {project} spent {share}: its tasks wait until {reset}"
    return f"Project {project} spent {share} (80 % warning)"


def announce(project: str, passed: list[Crossing]) -> None:
    """Say what a committed charge passed: a log line and a metric per mark."""
    for crossing in passed:
        metrics.budget_crossed(project, crossing)
        log.warning(
            "budget_exhausted" if crossing.exhausted else "budget_warning",
            project=project,
            window=str(crossing.window),
            spent_usd=round(crossing.spent, 6),
            limit_usd=crossing.limit,
        )


class BudgetService:
    def __init__(
        self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock, releases: "HoldReleases"
    ):
        self.db = db
        self.signal = signal
        self.clock = clock
        self.releases = releases

    async def set(
        self, project: str, *, daily_usd: float | None, monthly_usd: float | None, actor: str
    ) -> BudgetView:
        """Set a project's limits (None: no limit for that window); its hold follows at once
        from what it has spent: a raise releases its tasks, a cut may hold them."""
        for name, limit in (("daily_usd", daily_usd), ("monthly_usd", monthly_usd)):
            if limit is not None and not 0 <= limit <= MAX_BUDGET_USD:
                raise Invalid(f"{name} must be between 0 and {MAX_BUDGET_USD:,.0f}")
        if daily_usd is None and monthly_usd is None:
            raise Invalid("Give daily_usd, monthly_usd or both (to remove a budget, DELETE it)")
        now = self.clock()
        async with self.db.write() as tx:
            spent = await spend_of(tx, project, now)
            budget = Budget(project, daily_usd, monthly_usd, None, now, actor)
            budget = Budget(
                project, daily_usd, monthly_usd, held_until(budget, spent, now), now, actor
            )
            await tx.budgets.put(budget)
            await tx.audit.add(
                budget_audit(
                    AuditAction.BUDGET_SET,
                    project,
                    now=now,
                    actor=actor,
                    detail=f"Budget of {project}: daily {_amount(daily_usd)}, "
                    f"monthly {_amount(monthly_usd)}",
                )
            )
        self._changed()
        return _view(budget, spent, now)

    async def remove(self, project: str, *, actor: str) -> None:
        now = self.clock()
        async with self.db.write() as tx:
            if not await tx.budgets.delete(project):
                raise NotFound(f"No budget for project '{project}'")
            await tx.audit.add(
                budget_audit(
                    AuditAction.BUDGET_REMOVED,
                    project,
                    now=now,
                    actor=actor,
                    detail=f"Budget of {project} removed",
                )
            )
        self._changed()

    async def get(self, project: str) -> BudgetView:
        now = self.clock()
        async with self.db.read() as tx:
            budget = await tx.budgets.get(project)
            if budget is None:
                raise NotFound(f"No budget for project '{project}'")
            return _view(budget, await spend_of(tx, project, now), now)

    async def find(self) -> list[BudgetView]:
        now = self.clock()
        async with self.db.read() as tx:
            return [
                _view(budget, await spend_of(tx, budget.project, now), now)
                for budget in await tx.budgets.find()
            ]

    async def holds(self) -> dict[str, Hold]:
        """The projects whose queued tasks wait now, by project."""
        now = self.clock()
        async with self.db.read() as tx:
            held = await tx.budgets.held(now)
        return {project: Hold(project, until) for project, until in held.items()}

    async def with_holds(self, tasks: list[Task]) -> list[Task | dict[str, Any]]:
        """`tasks`, each queued one of a held project with its `hold` (why it waits, and until
        when) beside its fields; the budgets are read only when a queued task is among them."""
        if not any(task.status is TaskStatus.QUEUED for task in tasks):
            return list(tasks)
        holds = await self.holds()
        return [
            asdict(task) | {"hold": holds[task.agent_slug]}
            if task.status is TaskStatus.QUEUED and task.agent_slug in holds
            else task
            for task in tasks
        ]

    def _changed(self) -> None:
        self.signal.changed()  # a raise or a removal: waiting claims look again at once
        self.releases.changed()


def _amount(limit: float | None) -> str:
    return "none" if limit is None else f"${limit:.2f}"


def _view(budget: Budget, spent: Spend, now: int) -> BudgetView:
    return BudgetView(
        project=budget.project,
        daily_usd=budget.daily_usd,
        monthly_usd=budget.monthly_usd,
        spent_today_usd=spent.today,
        spent_month_usd=spent.month,
        held_until=budget.hold_at(now),
        daily_resets_at=reset_of(Window.DAILY, now),
        monthly_resets_at=reset_of(Window.MONTHLY, now),
        updated_at=budget.updated_at,
        updated_by=budget.updated_by,
    )


class HoldReleases:
    """Wakes the queue when a budget hold ends (its window reset): a timer for the soonest end,
    armed again whenever holds change here, and reread now and then for holds set elsewhere."""

    def __init__(self, db: RuntimeDatabase, signal: QueueSignal, clock: Clock):
        self.db = db
        self.signal = signal
        self.clock = clock
        self._changed = asyncio.Event()
        self._stopping = False

    def changed(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        while not self._stopping:
            self._changed.clear()
            delay, soonest = RELEASE_RECHECK_SEC, None
            try:
                async with self.db.read() as tx:
                    soonest = await tx.budgets.next_release(self.clock())
            except DatabaseUnavailable:
                pass  # said once, by the database's availability; read again later
            except Exception:
                log.exception("budget_releases_failed")
            if soonest is not None:
                delay = min(delay, max((soonest - self.clock()) / 1000, 0) + 0.01)
            try:
                await asyncio.wait_for(self._changed.wait(), delay)
            except TimeoutError:
                if soonest is not None and soonest <= self.clock():
                    log.info("budget_hold_ended")
                    self.signal.changed()

    def stop(self) -> None:
        self._stopping = True
        self._changed.set()
