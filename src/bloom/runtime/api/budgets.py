"""Budgets per project (a task's `agent_slug`): what it may spend per UTC day and month."""

from typing import Annotated

from fastapi import APIRouter, Path

from bloom.runtime.api.deps import Budgets, Caller
from bloom.runtime.api.schemas import MAX_ID_CHARS, BudgetBody
from bloom.runtime.http import JSON
from bloom.runtime.services.budgets import BudgetView

router = APIRouter(prefix="/api/runtime", tags=["budgets"])

Project = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]


@router.get("/budgets", response_model=list[BudgetView], summary="Every budget, with its spend")
async def list_budgets(budgets: Budgets) -> JSON:
    return JSON(await budgets.find())


@router.get("/budgets/{project}", response_model=BudgetView, summary="A project's budget")
async def get_budget(project: Project, budgets: Budgets) -> JSON:
    return JSON(await budgets.get(project))


@router.put(
    "/budgets/{project}",
    response_model=BudgetView,
    summary="Set a project's daily and monthly budget (USD; null: no limit for that window)",
)
async def put_budget(project: Project, body: BudgetBody, budgets: Budgets, caller: Caller) -> JSON:
    """Once the project's spend in a window reaches its limit, claims pass over its queued
    tasks until the window resets (they stay queued, nothing fails); a raise releases them at
    once. Running tasks are not stopped."""
    view = await budgets.set(
        project, daily_usd=body.daily_usd, monthly_usd=body.monthly_usd, actor=caller.name
    )
    return JSON(view)


@router.delete("/budgets/{project}", summary="Remove a project's budget (its tasks run again)")
async def delete_budget(project: Project, budgets: Budgets, caller: Caller) -> JSON:
    await budgets.remove(project, actor=caller.name)
    return JSON({"removed": True, "project": project})
