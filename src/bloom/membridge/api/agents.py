"""The agent registry."""

from fastapi import APIRouter, Response

from bloom.membridge.api.deps import Agents
from bloom.membridge.api.schemas import AgentBody, AgentOut
from bloom.membridge.services.agents import Registration

router = APIRouter(prefix="/agents", tags=["agents"])


@router.get("", response_model=list[AgentOut], summary="Every registered agent")
async def list_agents(agents: Agents) -> list[AgentOut]:
    return [AgentOut.of(agent) for agent in await agents.find()]


@router.post(
    "",
    status_code=201,
    response_model=AgentOut,
    responses={200: {"description": "An agent of that name existed, and was updated"}},
    summary="Register an agent, or update the one with this name (fields not sent are kept)",
)
async def register_agent(body: AgentBody, agents: Agents, response: Response) -> AgentOut:
    sent = body.model_fields_set
    caps = body.capabilities
    agent, created = await agents.register(
        Registration(
            name=body.name,
            url=body.url if "url" in sent else None,
            status=body.status if "status" in sent else None,
            capabilities=caps.model_dump(include=caps.model_fields_set) if caps else None,
        )
    )
    if not created:
        response.status_code = 200
    return AgentOut.of(agent)


@router.delete("/{name}", status_code=204, summary="Unregister an agent")
async def remove_agent(name: str, agents: Agents) -> Response:
    await agents.remove(name)
    return Response(status_code=204)
