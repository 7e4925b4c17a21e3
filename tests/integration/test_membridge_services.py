"""Membridge's use-cases on both databases, driven by a hand-moved clock: leadership epochs and
expiry, heartbeats as signs of life, registration as an update, the jobs log, the listing."""

import asyncio

import pytest

from bloom.domain.errors import Conflict, NotFound
from bloom.domain.ids import canonical_id
from bloom.membridge.container import Container
from bloom.membridge.models import Job
from bloom.membridge.rules import Role
from bloom.membridge.services.agents import Registration
from bloom.membridge.services.fleet import Heartbeat, NodeView
from tests.support.clock import FakeClock

CID = canonical_id("garden")


def roles(view_nodes: list[NodeView]) -> dict[str, Role]:
    return {view.node.node_id: view.role for view in view_nodes}


async def test_a_choice_lasts_its_lease_then_every_role_is_unknown(
    membridge_services: Container, clock: FakeClock
) -> None:
    fleet = membridge_services.fleet
    assert await fleet.heartbeat(Heartbeat("node-a", CID)) is Role.UNKNOWN
    assert await fleet.heartbeat(Heartbeat("node-b", CID)) is Role.UNKNOWN
    issued = clock.now
    chosen = await fleet.select(CID, "node-a", 60)
    assert (chosen.epoch, chosen.issued_at, chosen.expires_at) == (1, issued, issued + 60_000)
    assert await fleet.heartbeat(Heartbeat("node-a", CID)) is Role.PRIMARY
    assert await fleet.heartbeat(Heartbeat("node-b", CID)) is Role.SECONDARY

    clock.advance(59.999)
    view = await fleet.leadership(CID)
    assert view.in_force
    assert roles(view.nodes) == {"node-a": Role.PRIMARY, "node-b": Role.SECONDARY}

    clock.advance(0.001)  # exactly at expires_at: over
    view = await fleet.leadership(CID)
    assert not view.in_force
    assert view.choice is not None
    assert view.choice.primary_node_id == "node-a"
    assert roles(view.nodes) == {"node-a": Role.UNKNOWN, "node-b": Role.UNKNOWN}
    assert roles(await fleet.nodes(CID)) == {"node-a": Role.UNKNOWN, "node-b": Role.UNKNOWN}
    assert await fleet.heartbeat(Heartbeat("node-a", CID)) is Role.UNKNOWN

    renewed = await fleet.select(CID, "node-b", 30)
    assert (renewed.epoch, renewed.primary_node_id) == (2, "node-b")
    assert (renewed.issued_at, renewed.expires_at) == (clock.now, clock.now + 30_000)
    assert await fleet.heartbeat(Heartbeat("node-a", CID)) is Role.SECONDARY
    assert await fleet.heartbeat(Heartbeat("node-b", CID)) is Role.PRIMARY


async def test_choices_are_per_project_and_need_no_known_node(
    membridge_services: Container,
) -> None:
    other = canonical_id("other")
    chosen = await membridge_services.fleet.select(other, "future-node", 3600)
    assert chosen.epoch == 1
    assert (await membridge_services.fleet.leadership(CID)).choice is None
    assert await membridge_services.fleet.heartbeat(Heartbeat("future-node", other)) is Role.PRIMARY
    assert await membridge_services.fleet.heartbeat(Heartbeat("future-node", CID)) is Role.UNKNOWN


async def test_concurrent_selections_each_get_their_own_epoch(
    membridge_services: Container,
) -> None:
    """Ten operators choosing at once: one conditional write each, epochs 1..10, none lost."""
    chosen = await asyncio.gather(
        *(membridge_services.fleet.select(CID, f"node-{i}", 600) for i in range(10))
    )
    assert sorted(choice.epoch for choice in chosen) == list(range(1, 11))
    stored = (await membridge_services.fleet.leadership(CID)).choice
    assert stored is not None
    assert stored.epoch == 10
    last = next(choice for choice in chosen if choice.epoch == 10)
    assert stored.primary_node_id == last.primary_node_id


async def test_a_heartbeat_is_stamped_with_our_clock_and_keeps_the_first_registration(
    membridge_services: Container, clock: FakeClock
) -> None:
    first = clock.now
    stale = (first - 86_400_000) / 1000  # what the reference agent sends: a day-old float
    await membridge_services.fleet.heartbeat(
        Heartbeat(
            "node-a",
            CID,
            obs_count=12,
            db_sha="abc123",
            last_seen=stale,
            ip_addrs=["10.0.0.5"],
            project_id="garden",
            agent_version="0.4.0",
        )
    )
    clock.advance(10)
    await membridge_services.fleet.heartbeat(
        Heartbeat("node-a", CID, obs_count=13, agent_version="0.4.1")
    )
    [view] = await membridge_services.fleet.nodes(CID)
    node = view.node
    assert node.registered_at == first
    assert node.last_seen == clock.now  # ours, not the node's stale value
    # the latest report replaces the earlier one
    assert (node.obs_count, node.db_sha, node.reported_last_seen) == (13, None, None)
    assert (node.ip_addrs, node.project_id, node.agent_version) == ([], None, "0.4.1")


async def test_the_reported_last_seen_is_kept_apart_in_milliseconds(
    membridge_services: Container,
) -> None:
    await membridge_services.fleet.heartbeat(Heartbeat("node-a", CID, last_seen=1_700_000_000.25))
    await membridge_services.fleet.heartbeat(Heartbeat("node-b", CID, last_seen=1_700_000_000_250))
    found = {view.node.node_id: view.node for view in await membridge_services.fleet.nodes(CID)}
    assert found["node-a"].reported_last_seen == 1_700_000_000_250
    assert found["node-b"].reported_last_seen == 1_700_000_000_250


async def test_a_heartbeat_is_a_sign_of_life_of_the_agent_with_the_nodes_name(
    membridge_services: Container, clock: FakeClock
) -> None:
    agents = membridge_services.agents
    await agents.register(Registration("node-a"))  # unknown
    await agents.register(Registration("node-b", status="offline"))
    await agents.register(Registration("node-c", status="error"))
    await agents.register(Registration("bystander", status="offline"))
    clock.advance(5)
    for node in ("node-a", "node-b", "node-c", "unregistered-node"):
        await membridge_services.fleet.heartbeat(Heartbeat(node, CID))
    found = {agent.name: agent for agent in await agents.find()}
    assert {name: agent.status for name, agent in found.items()} == {
        "node-a": "online",
        "node-b": "online",
        "node-c": "error",  # the agent's own word about a problem stands
        "bystander": "offline",
    }
    assert {name: agent.last_seen for name, agent in found.items()} == {
        "node-a": clock.now,
        "node-b": clock.now,
        "node-c": clock.now,
        "bystander": None,
    }


async def test_registering_again_updates_only_what_is_sent(
    membridge_services: Container, clock: FakeClock
) -> None:
    agents = membridge_services.agents
    created_at = clock.now
    agent, created = await agents.register(
        Registration(
            "worker-01",
            url="http://10.0.0.5:8001",
            status="online",
            capabilities={"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
        )
    )
    assert created
    assert agent.capabilities == {
        "claude_cli": True,
        "max_concurrency": 1,
        "labels": ["production"],
    }
    clock.advance(3)
    agent, created = await agents.register(
        Registration("worker-01", capabilities={"max_concurrency": 4})
    )
    assert not created
    assert (agent.url, agent.status, agent.registered_at) == (
        "http://10.0.0.5:8001",
        "online",
        created_at,
    )
    assert agent.capabilities == {
        "claude_cli": True,
        "max_concurrency": 4,
        "labels": ["production"],
    }
    assert agent.updated_at == clock.now
    agent, created = await agents.register(Registration("worker-01", status="offline", url=""))
    assert (agent.url, agent.status, agent.capabilities["max_concurrency"]) == ("", "offline", 4)
    assert [a.name for a in await agents.find()] == ["worker-01"]


async def test_a_new_agent_gets_the_defaults(
    membridge_services: Container, clock: FakeClock
) -> None:
    agent, created = await membridge_services.agents.register(
        Registration("bare", capabilities={"labels": ["gpu"]})
    )
    assert created
    assert (agent.url, agent.status, agent.last_seen, agent.registered_at) == (
        "",
        "unknown",
        None,
        clock.now,
    )
    assert agent.capabilities == {"claude_cli": True, "max_concurrency": 1, "labels": ["gpu"]}


async def test_concurrent_first_registrations_create_one_agent(
    membridge_services: Container,
) -> None:
    results = await asyncio.gather(
        *(
            membridge_services.agents.register(Registration("racer", status="online"))
            for _ in range(8)
        )
    )
    assert sorted(created for _, created in results) == [False] * 7 + [True]
    assert [agent.name for agent in await membridge_services.agents.find()] == ["racer"]


async def test_removing_agents_and_projects(membridge_services: Container) -> None:
    await membridge_services.agents.register(Registration("gone"))
    await membridge_services.agents.remove("gone")
    with pytest.raises(NotFound, match="Agent 'gone' not found"):
        await membridge_services.agents.remove("gone")
    await membridge_services.projects.create("garden")
    with pytest.raises(Conflict, match="Project 'garden' already exists"):
        await membridge_services.projects.create("garden")
    await membridge_services.projects.remove("garden")
    with pytest.raises(NotFound, match="Project 'garden' not found"):
        await membridge_services.projects.remove("garden")
    assert await membridge_services.projects.counts() == (0, 0)


async def test_the_listing_merges_manual_and_heartbeat_projects(
    membridge_services: Container, clock: FakeClock
) -> None:
    created = clock.now
    await membridge_services.projects.create("garden")
    clock.advance(1)
    await membridge_services.fleet.heartbeat(Heartbeat("node-a", CID, project_id="garden"))
    await membridge_services.fleet.heartbeat(Heartbeat("node-b", CID))
    await membridge_services.fleet.heartbeat(
        Heartbeat("node-a", canonical_id("wild"), project_id="wild")
    )
    listing = [
        (e.name, e.canonical_id, e.created_at, e.last_seen, e.nodes_count, e.source)
        for e in await membridge_services.projects.find()
    ]
    assert listing == [
        ("garden", CID, created, clock.now, 2, "manual"),
        ("wild", canonical_id("wild"), None, clock.now, 1, "heartbeat"),
    ]
    assert await membridge_services.projects.counts() == (1, 0)


def job(job_id: str, project: str, created_at: int, **fields: object) -> Job:
    values: dict[str, object] = {
        "id": job_id,
        "action": "pull",
        "project": project,
        "agent": "worker-01",
        "canonical_id": canonical_id(project),
        "status": "completed",
        "detail": None,
        "stdout": None,
        "stderr": None,
        "returncode": None,
        "dryrun": False,
        "created_at": created_at,
        "finished_at": None,
        "request_id": None,
    }
    return Job(**(values | fields))  # type: ignore[arg-type]


async def test_jobs_newest_first_with_limit_and_project(membridge_services: Container) -> None:
    stored = [
        job("j1", "garden", 1_000),
        job("j2", "other", 2_000),
        job("j3", "garden", 3_000, dryrun=True, returncode=0, finished_at=3_500, stdout="ok"),
        job("j4", "garden", 3_000),  # same time as j3: the id breaks the tie
    ]
    async with membridge_services.db.write() as tx:
        for entry in stored:
            await tx.jobs.add(entry)
    assert [j.id for j in await membridge_services.jobs.find(limit=50)] == ["j4", "j3", "j2", "j1"]
    assert [j.id for j in await membridge_services.jobs.find(limit=2)] == ["j4", "j3"]
    assert [j.id for j in await membridge_services.jobs.find(limit=50, project="garden")] == [
        "j4",
        "j3",
        "j1",
    ]
    assert await membridge_services.jobs.find(limit=50, project="nobody") == []
    assert await membridge_services.jobs.get("j3") == stored[2]
    with pytest.raises(NotFound, match="Job 'nope' not found"):
        await membridge_services.jobs.get("nope")
