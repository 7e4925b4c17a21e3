"""Node heartbeats, each project's nodes, and the choice of its primary."""

from fastapi import APIRouter

from bloom.membridge.api.deps import Fleet
from bloom.membridge.api.schemas import (
    HeartbeatBody,
    HeartbeatReply,
    LeadershipOut,
    NodeOut,
    NodeSighting,
    SelectBody,
    SelectReply,
)
from bloom.membridge.services.fleet import Heartbeat

router = APIRouter(tags=["nodes and leadership"])


@router.post(
    "/agent/heartbeat",
    response_model=HeartbeatReply,
    summary="A node reports on a project; the answer is its role now",
)
async def heartbeat(body: HeartbeatBody, fleet: Fleet) -> HeartbeatReply:
    role = await fleet.heartbeat(Heartbeat(**body.model_dump()))
    return HeartbeatReply(role=role, canonical_id=body.canonical_id)


@router.get(
    "/nodes",
    response_model=list[NodeSighting],
    summary="Every node that heartbeats, with its latest heartbeat over all its projects",
)
async def list_sightings(fleet: Fleet) -> list[NodeSighting]:
    return [
        NodeSighting(node_id=node, last_seen=seen / 1000, projects=projects)
        for node, seen, projects in await fleet.sightings()
    ]


@router.get(
    "/projects/{canonical_id}/nodes",
    response_model=list[NodeOut],
    summary="The nodes that reported on a project ([] for an unknown one), with their roles",
)
async def list_nodes(canonical_id: str, fleet: Fleet) -> list[NodeOut]:
    return [NodeOut.of(view.node, view.role) for view in await fleet.nodes(canonical_id)]


@router.get(
    "/projects/{canonical_id}/leadership",
    response_model=LeadershipOut,
    summary="The project's chosen primary (with epoch and expiry) and its nodes' roles",
)
async def get_leadership(canonical_id: str, fleet: Fleet) -> LeadershipOut:
    view = await fleet.leadership(canonical_id)
    choice = view.choice
    primary = choice.primary_node_id if choice else None
    return LeadershipOut(
        canonical_id=canonical_id,
        preferred_primary=primary,
        primary_node_id=primary,
        needs_ui_selection=bool(view.nodes) and not (choice is not None and view.in_force),
        node_count=len(view.nodes),
        nodes=[NodeOut.of(node.node, node.role) for node in view.nodes],
        epoch=choice.epoch if choice else 0,
        issued_at=choice.issued_at / 1000 if choice else None,
        expires_at=choice.expires_at / 1000 if choice else None,
        lease_seconds=choice.lease_seconds if choice else None,
        expired=choice is not None and not view.in_force,
    )


@router.post(
    "/projects/{canonical_id}/leadership/select",
    response_model=SelectReply,
    summary="Choose the project's primary node for lease_seconds (stored; bumps the epoch)",
)
async def select_primary(canonical_id: str, body: SelectBody, fleet: Fleet) -> SelectReply:
    choice = await fleet.select(canonical_id, body.primary_node_id, body.lease_seconds)
    return SelectReply.of(choice)
