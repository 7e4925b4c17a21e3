"""What the fleet's work cost: `GET /api/runtime/usage`."""

from typing import Annotated

from fastapi import APIRouter, Query

from bloom.domain.usage import MAX_USAGE_GROUPS, UsageGroup, parse_instant
from bloom.runtime.api.deps import Usage
from bloom.runtime.api.replies import UsageAnswer
from bloom.runtime.http import JSON

router = APIRouter(prefix="/api/runtime", tags=["usage"])

INSTANT = "Epoch milliseconds, or ISO 8601 (a date or a date-time; UTC unless it says)."


@router.get(
    "/usage",
    response_model=UsageAnswer,
    summary="Cost, tokens and attempts summed by project, context, agent, worker, model, "
    "agent CLI, day or hour",
)
async def usage(
    usage: Usage,
    group_by: UsageGroup = UsageGroup.PROJECT,
    from_: Annotated[
        str | None,
        Query(alias="from", max_length=64, description=f"Default today 00:00 UTC. {INSTANT}"),
    ] = None,
    to: Annotated[str | None, Query(max_length=64, description=f"Default now. {INSTANT}")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_USAGE_GROUPS)] = MAX_USAGE_GROUPS,
) -> JSON:
    report = await usage.report(
        group_by,
        first=None if from_ is None else parse_instant(from_, "from"),
        end=None if to is None else parse_instant(to, "to"),
        limit=limit,
    )
    return JSON(
        {
            "group_by": report.group_by,
            "from": report.first,
            "to": report.end,
            "groups": report.groups,
            "total": report.total,
            "truncated": report.truncated,
        }
    )
