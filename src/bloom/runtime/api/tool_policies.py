"""Tool policies per project (a task's `agent_slug`): the rules its tasks' policies are merged
with at create (docs/approvals.md)."""

from typing import Annotated

from fastapi import APIRouter, Path

from bloom.domain.tool_policy import ProjectToolPolicy
from bloom.runtime.api.deps import Caller, ToolPolicies
from bloom.runtime.api.schemas import MAX_ID_CHARS, ToolPolicyBody
from bloom.runtime.http import JSON
from bloom.runtime.services.tool_policies import ToolRules

router = APIRouter(prefix="/api/runtime", tags=["tool-policies"])

Project = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]


@router.get(
    "/tool-policies",
    response_model=list[ProjectToolPolicy],
    summary="Every project's default tool policy",
)
async def list_tool_policies(policies: ToolPolicies) -> JSON:
    return JSON(await policies.find())


@router.get(
    "/tool-policies/{project}",
    response_model=ProjectToolPolicy,
    summary="A project's default tool policy",
)
async def get_tool_policy(project: Project, policies: ToolPolicies) -> JSON:
    return JSON(await policies.get(project))


@router.put(
    "/tool-policies/{project}",
    response_model=ProjectToolPolicy,
    summary="Set (replace) a project's default tool policy",
)
async def put_tool_policy(
    project: Project, body: ToolPolicyBody, policies: ToolPolicies, caller: Caller
) -> JSON:
    """Merged into each task of the project created from now on: its deny always wins over a
    task's allow, allow and ask are unions, a task's mode and max_turns win over the project's.
    A task may ask for `bypassPermissions` only where `allow_bypass` is true. `ask` rules are
    refused until approvals exist."""
    rules = ToolRules(
        allow=tuple(body.allow),
        deny=tuple(body.deny),
        ask=tuple(body.ask),
        mode=body.mode,
        max_turns=body.max_turns,
        allow_bypass=body.allow_bypass,
    )
    return JSON(await policies.set(project, rules, actor=caller.name))


@router.delete("/tool-policies/{project}", summary="Remove a project's default tool policy")
async def delete_tool_policy(project: Project, policies: ToolPolicies, caller: Caller) -> JSON:
    await policies.remove(project, actor=caller.name)
    return JSON({"removed": True, "project": project})
