"""SQL for budgets per project and the spend they are checked against (`project_spend`: a
project's cost per UTC day, added to by each complete that reports one)."""

from typing import Any

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.domain.budget import Budget, Spend
from bloom.runtime.storage.tables import budgets, project_spend

BUDGET_COLUMNS = entity_columns(budgets, Budget)
b, ps = budgets, project_spend


def _upserts() -> tuple[dict[str, Any], dict[str, Any]]:
    charge, put = {}, {}
    for kind, dialect in (("postgresql", postgresql), ("sqlite", sqlite)):
        spend = dialect.insert(ps)
        charge[kind] = spend.on_conflict_do_update(
            index_elements=[ps.c.project, ps.c.day],
            set_={"cost_usd": ps.c.cost_usd + spend.excluded.cost_usd},
        )
        budget = dialect.insert(b)
        put[kind] = budget.on_conflict_do_update(
            index_elements=[b.c.project],
            set_={
                name: budget.excluded[name]
                for name in ("daily_usd", "monthly_usd", "held_until", "updated_at", "updated_by")
            },
        )
    return charge, put


_CHARGE, _PUT = _upserts()
_SPEND = select(
    func.coalesce(func.sum(ps.c.cost_usd).filter(ps.c.day >= bindparam("b_today")), 0.0),
    func.coalesce(func.sum(ps.c.cost_usd), 0.0),
).where(ps.c.project == bindparam("b_project"), ps.c.day >= bindparam("b_month"))
_GET = select(*BUDGET_COLUMNS).where(b.c.project == bindparam("b_project"))
_LIST = select(*BUDGET_COLUMNS).order_by(b.c.project)
_DELETE = delete(b).where(b.c.project == bindparam("b_project")).returning(b.c.project)
_HELD = select(b.c.project, b.c.held_until).where(b.c.held_until > bindparam("b_now"))
_NEXT_RELEASE = select(func.min(b.c.held_until)).where(b.c.held_until > bindparam("b_now"))
_HOLD = (
    update(b)
    .where(
        b.c.project == bindparam("b_project"),
        # the limits as they are when this runs (a raise committed meanwhile wins)
        or_(
            b.c.daily_usd <= bindparam("b_today_spent"),
            b.c.monthly_usd <= bindparam("b_month_spent"),
        ),
        or_(b.c.held_until.is_(None), b.c.held_until < bindparam("b_until")),
    )
    .values(held_until=bindparam("b_until"))
    .returning(b.c.project)
)


class BudgetRepository(Repository):
    async def get(self, project: str) -> Budget | None:
        return await self.one(Budget, _GET, {"b_project": project})

    async def find(self) -> list[Budget]:
        return await self.all(Budget, _LIST, {})

    async def put(self, budget: Budget) -> None:
        await self.run(_PUT[self.kind], entity_values(budget, BUDGET_COLUMNS))

    async def delete(self, project: str) -> bool:
        return bool(await self.run(_DELETE, {"b_project": project}))

    async def charge(self, project: str, day: int, cost_usd: float) -> None:
        """Add `cost_usd` to the project's spend on `day` (UTC midnight). The row stays locked
        to this transaction, so concurrent charges add up in turn and each reads its own total."""
        values = {"project": project, "day": day, "cost_usd": cost_usd}
        await self.run(_CHARGE[self.kind], values)

    async def spend(self, project: str, *, today: int, month: int) -> Spend:
        """What the project spent since `today` and since `month` (UTC midnights)."""
        params = {"b_project": project, "b_today": today, "b_month": month}
        rows = await self.rows(_SPEND, params)
        return Spend(float(rows[0][0]), float(rows[0][1]))

    async def hold(self, project: str, until: int, spent: Spend) -> bool:
        """Hold the project's tasks until `until` if its limits, as they stand, are spent by
        `spent` (and it is not held longer already)."""
        params = {
            "b_project": project,
            "b_until": until,
            "b_today_spent": spent.today,
            "b_month_spent": spent.month,
        }
        return bool(await self.run(_HOLD, params))

    async def held(self, now: int) -> dict[str, int]:
        """The projects held at `now`, and until when."""
        return {project: int(until) for project, until in await self.rows(_HELD, {"b_now": now})}

    async def next_release(self, now: int) -> int | None:
        """The soonest end of a hold after `now`, if any."""
        until = await self.scalar(_NEXT_RELEASE, {"b_now": now})
        return None if until is None else int(until)
