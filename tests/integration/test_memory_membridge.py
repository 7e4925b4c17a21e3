"""Memory sync through the control plane: Membridge in-process, two nodes' agent surfaces
serving on real ports, the bucket on the real S3 endpoint. Sync jobs recorded with the agents'
answers; the leadership select writes the lease, so moving the primary changes who may push."""

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from bloom.clients.runtime import RuntimeClient
from bloom.domain.fleet import node_agent_key
from bloom.domain.ids import canonical_id
from bloom.domain.memory import Keys, Lease
from bloom.membridge.app import create_app
from bloom.memory.actions import Action
from bloom.memory.settings import MemorySettings
from bloom.worker.agent import Worker
from bloom.worker.agent_http import AgentSurface, serving
from bloom.worker.memory_auto import MemoryAutoSync
from bloom.worker.settings import WorkerSettings
from tests.support.agent import runs_nothing
from tests.support.membridge import membridge_settings
from tests.support.memory import add_observations, count, make_db, node_settings
from tests.support.net import closed_port, free_port
from tests.support.s3 import Bucket
from tests.support.wire import grant

CID = canonical_id("mem")
FLEET_KEY = "fleet-agent-key-0123456789"


@pytest.fixture
async def membridge(
    s3_bucket: Bucket, tmp_path: Path, membridge_db_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    """Membridge in-process on each kind of database, with the memory bucket configured."""
    store = s3_bucket.settings() | {"memory_bucket": s3_bucket.name}
    settings = membridge_settings(membridge_db_url, tmp_path, agent_key=FLEET_KEY, **store)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://membridge") as http:
            yield http


@pytest.fixture
async def agents(
    s3_bucket: Bucket, tmp_path: Path, membridge: httpx.AsyncClient
) -> AsyncIterator[Callable[[str], MemorySettings]]:
    """Nodes a and b, each an agent surface on a port of its own, registered with Membridge."""
    nodes = {name: node_settings(s3_bucket, tmp_path, name, "mem") for name in ("a", "b")}
    async with AsyncExitStack() as stack:
        for name, memory in nodes.items():
            port = free_port()
            own_key = node_agent_key(FLEET_KEY, name)  # Membridge sends each node its own
            worker = WorkerSettings(name=name, agent_port=port, agent_key=own_key)
            surface = AgentSurface(worker, runs_nothing, list, memory)
            await stack.enter_async_context(serving(surface))
            registered = await membridge.post(
                "/agents", json={"name": name, "url": f"http://127.0.0.1:{port}"}
            )
            assert registered.status_code in (200, 201), registered.text
        assert (await membridge.post("/projects", json={"name": "mem"})).status_code == 201
        yield nodes.__getitem__


async def sync(http: httpx.AsyncClient, action: str, agent: str) -> dict[str, object]:
    response = await http.post(f"/sync/{action}", json={"project": "mem", "agent": agent})
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


async def agent_status(http: httpx.AsyncClient, name: str) -> str:
    listed = (await http.get("/agents")).json()
    return str(next(agent["status"] for agent in listed if agent["name"] == name))


async def test_sync_jobs_and_a_primary_moved_from_the_control_plane(
    membridge: httpx.AsyncClient, agents: Callable[[str], MemorySettings], s3_bucket: Bucket
) -> None:
    a, b = agents("a"), agents("b")
    make_db(a.db, observations=6)

    pushed = await sync(membridge, "push", "a")
    assert pushed["ok"] is True, pushed
    assert pushed["canonical_id"] == CID
    pulled = await sync(membridge, "pull", "b")
    assert pulled["ok"] is True, pulled
    assert count(b.db) == 6

    blocked = await sync(membridge, "push", "b")
    assert blocked["ok"] is False
    job = (await membridge.get(f"/jobs/{blocked['job_id']}")).json()
    assert (job["status"], job["returncode"], job["action"]) == ("failed", 3, "push")
    assert await agent_status(membridge, "b") == "online"

    selected = await membridge.post(
        f"/projects/{CID}/leadership/select", json={"primary_node_id": "b", "lease_seconds": 600}
    )
    assert selected.status_code == 200, selected.text
    assert selected.json()["epoch"] == 2, "the lease's epoch 1 was a's bootstrap"
    body = s3_bucket.client().get_object(Bucket=s3_bucket.name, Key=Keys(CID).lease)["Body"]
    lease = Lease.from_json(body.read())
    assert (lease.primary_node_id, lease.epoch, lease.issued_by) == ("b", 2, "membridge")
    leadership = (await membridge.get(f"/projects/{CID}/leadership")).json()
    assert (leadership["primary_node_id"], leadership["epoch"]) == ("b", 2)

    add_observations(b.db, 4, tag="b")
    assert (await sync(membridge, "push", "b"))["ok"] is True
    refused = await sync(membridge, "push", "a")
    assert refused["ok"] is False
    assert (await sync(membridge, "pull", "a"))["ok"] is True
    assert count(a.db) == 10

    jobs = (await membridge.get("/jobs", params={"project": "mem"})).json()
    assert [(job["action"], job["agent"], job["status"]) for job in jobs] == [
        ("pull", "a", "completed"), ("push", "a", "failed"), ("push", "b", "completed"),
        ("push", "b", "failed"), ("pull", "b", "completed"), ("push", "a", "completed"),
    ]  # newest first  # fmt: skip


async def test_unknown_names_are_404_and_an_unreachable_agent_a_502(
    membridge: httpx.AsyncClient, agents: Callable[[str], MemorySettings]
) -> None:
    unknown = await membridge.post("/sync/pull", json={"project": "nope", "agent": "a"})
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "Project 'nope' not found"}
    url = f"http://127.0.0.1:{closed_port()}"
    await membridge.post("/agents", json={"name": "gone", "url": url})
    gone = await membridge.post("/sync/push", json={"project": "mem", "agent": "gone"})
    assert gone.status_code == 502
    assert gone.json() == {"detail": f"Agent 'gone' unreachable at {url}"}
    assert await agent_status(membridge, "gone") == "offline"
    job = (await membridge.get("/jobs", params={"project": "mem"})).json()[0]
    assert (job["agent"], job["status"]) == ("gone", "error")


async def test_the_agent_reports_memory_status(
    agents: Callable[[str], MemorySettings], membridge: httpx.AsyncClient
) -> None:
    make_db(agents("a").db, observations=2)
    a_url = next(x["url"] for x in (await membridge.get("/agents")).json() if x["name"] == "a")
    a_key = {"X-MEMBRIDGE-AGENT": node_agent_key(FLEET_KEY, "a")}
    # A memory status reads the bucket (the tests' S3 server), which can take longer than httpx's
    # default 5 s on a loaded machine: this test checks what the agent answers, not how fast.
    async with httpx.AsyncClient(base_url=a_url, headers=a_key, timeout=60) as http:
        b_key = {"X-MEMBRIDGE-AGENT": node_agent_key(FLEET_KEY, "b")}
        assert (await http.get("/status", headers=b_key)).status_code == 401  # b's opens no a
        status = (await http.get("/status", params={"project": "mem"})).json()
        assert status["memory"]["ok"] is True
        assert status["memory"]["local"]["observations"] == 2
        assert (await http.post("/sync/push", json={})).status_code == 422


async def test_automatic_mode_heartbeats_show_which_node_is_behind(
    membridge: httpx.AsyncClient, s3_bucket: Bucket, tmp_path: Path
) -> None:
    """Two workers' automatic sync of project mem (their other projects untouched): pulled at
    start, pushed after a task; their heartbeats carry counts and digests, so the control
    plane's node list shows the node that has not pulled the primary's latest push."""
    nodes = {n: node_settings(s3_bucket, tmp_path, n, "mem") for n in ("a", "b")}
    make_db(nodes["a"].db, observations=5)
    a, b = (MemoryAutoSync(settings, ["mem"]) for settings in nodes.values())
    assert await a.sync(Action.PUSH, "other-project") is None

    await a.sync(Action.PUSH, "mem")  # after a task of the project: a bootstraps as primary
    await b.start()
    assert count(nodes["b"].db) == 5
    add_observations(nodes["a"].db, 2)
    await a.sync(Action.PUSH, "mem")

    for auto, name in ((a, "a"), (b, "b")):
        for beat in auto.beats(name, "test"):
            assert (await membridge.post("/agent/heartbeat", json=beat)).status_code == 200
    listed = (await membridge.get(f"/projects/{CID}/nodes")).json()
    held = {node["node_id"]: (node["obs_count"], node["db_sha"], node["role"]) for node in listed}
    assert held["a"][0] == 7
    assert held["b"][0] == 5
    assert held["a"][1] != held["b"][1], "b is behind: another digest"
    assert (held["a"][2], held["b"][2]) == ("primary", "secondary"), "roles from the lease"


async def test_the_worker_pushes_after_a_task_of_its_project(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    """A task of project mem ends (here: its lease was lost before it started, the shortest
    run there is); the worker then pushes mem's memory. A task of another project does not."""
    memory = node_settings(s3_bucket, tmp_path, "w1", "mem")
    make_db(memory.db, observations=3)

    def runtime(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "Lease l1 is no longer active (expired)"})

    settings = WorkerSettings(name="w1", data_dir=tmp_path, memory_projects=["mem"])
    transport = httpx.MockTransport(runtime)
    async with RuntimeClient("http://runtime", transport=transport) as client:
        worker = Worker(settings, client, memory=memory)
        await worker._run(grant(agent_slug="other"))
        assert s3_bucket.keys() == []
        await worker._run(grant(agent_slug="mem"))
    assert Keys(CID).manifest in s3_bucket.keys(prefix=Keys(CID).prefix)
    assert worker.memory_auto is not None
    assert worker.memory_auto.held["mem"][0] == 3


async def test_automatic_mode_renews_the_primarys_lease_before_it_expires(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    now = [time.time_ns() // 1_000_000]
    memory = node_settings(s3_bucket, tmp_path, "a", "mem", lease_seconds=100)
    other = node_settings(  # b would take over the moment a's lease lapsed
        s3_bucket, tmp_path, "b", "mem", lease_seconds=100, primary_node_id="b"
    )
    a = MemoryAutoSync(memory, ["mem"], clock=lambda: now[0])
    b = MemoryAutoSync(other, ["mem"], clock=lambda: now[0])

    def lease() -> Lease:
        body = s3_bucket.client().get_object(Bucket=s3_bucket.name, Key=Keys(CID).lease)["Body"]
        return Lease.from_json(body.read())

    await a.settle_leases()
    await b.settle_leases()
    first = lease()
    assert (a.roles, b.roles, first.epoch) == ({"mem": "primary"}, {"mem": "secondary"}, 1)
    now[0] += 40_000  # within the first half: nothing written
    await a.settle_leases()
    assert lease() == first
    now[0] += 20_000  # past half term: renewed, same epoch
    await a.settle_leases()
    renewed = lease()
    assert (renewed.epoch, renewed.expires_at) == (1, first.expires_at + 60)
    now[0] += 90_000  # the first lease would have lapsed here; the renewed one holds
    await b.settle_leases()
    assert b.roles == {"mem": "secondary"}
