"""Managed projects over the runtime's API, on both databases, against stand-in agents over real
HTTP (and once a real worker's `/clone` with real git): create, list, get, delete; names unique;
bad input a 400; a clone recorded as the agent answered (`ok: false` and an unreachable agent are
failures, 502); a clone elsewhere never moves the primary; propagation partial or synced, its
calls overlapping but bounded; admins only; and the dashboard's projects page and buttons."""

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.fleet import node_agent_key
from bloom.domain.identity import Role
from bloom.runtime.services.projects import PROPAGATE_AT_ONCE
from bloom.runtime.settings import RuntimeSettings
from bloom.worker.agent_http import AgentSurface, serving
from bloom.worker.settings import WorkerSettings
from tests.support.access import ADMIN_KEY, HEADER
from tests.support.agent import Answer, StandInAgent, runs_nothing
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.git import GitServer
from tests.support.net import closed_port, free_port

AGENT_KEY = "agent-key-0123456789"
PROJECTS = f"{API}/projects"
DEMO = {"name": "demo", "repo_url": "https://git.example/demo.git"}
CLONED = {"ok": True, "action": "clone", "path": "/home/n/projects/demo", "detail": "Cloned"}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, agent_key=AGENT_KEY, api_key=ADMIN_KEY)


@pytest.fixture
def api(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """The in-process runtime, called with the admin key."""
    client.headers[HEADER] = ADMIN_KEY
    return client


def stand_in() -> Iterator[StandInAgent]:
    served = StandInAgent()
    served.answers["/clone"] = Answer(body=CLONED)
    served.start()
    yield served
    served.stop()


agent = pytest.fixture(stand_in)
other_agent = pytest.fixture(stand_in)


async def node(api: httpx.AsyncClient, name: str, url: str | None) -> None:
    body = {"name": name, "status": "offline"} | ({"url": url} if url else {})
    assert (await api.post(f"{API}/workers", json=body)).status_code == 201


async def project(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    made = await api.post(PROJECTS, json=DEMO | fields)
    assert made.status_code == 201, made.text
    return dict(made.json())


async def detail(api: httpx.AsyncClient, project_id: str) -> dict[str, Any]:
    found = await api.get(f"{PROJECTS}/{project_id}")
    assert found.status_code == 200, found.text
    return dict(found.json())


async def trail(api: httpx.AsyncClient, project_id: str) -> list[tuple[str, str]]:
    entries = (await api.get(f"{API}/audit", params={"limit": 1000})).json()
    return [(e["action"], e["detail"]) for e in reversed(entries) if e["entity_id"] == project_id]


async def test_create_list_get_and_delete(api: httpx.AsyncClient) -> None:
    first = await project(api, target_path="~/projects/demo", primary_node_id="n1")
    assert first | {"id": "", "created_at": 0, "updated_at": 0} == {
        "id": "", "name": "demo", "repo_url": DEMO["repo_url"],
        "canonical_id": hashlib.sha256(b"demo").hexdigest()[:16],
        "target_path": "~/projects/demo", "clone_status": "pending", "primary_node_id": "n1",
        "created_at": 0, "updated_at": 0, "error_message": None,
    }  # fmt: skip
    second = await project(api, name="other project", repo_url="git@git.example:o.git")
    listed = (await api.get(PROJECTS)).json()
    assert [p["id"] for p in listed] == [second["id"], first["id"]], "newest first"
    assert await detail(api, first["id"]) == first | {"nodes": []}
    assert (await api.get(f"{PROJECTS}/{first['id']}/node-status")).json() == []

    removed = await api.delete(f"{PROJECTS}/{first['id']}")
    assert removed.json() == {"removed": True, "id": first["id"]}
    for path in ("", "/node-status"):
        gone = await api.get(f"{PROJECTS}/{first['id']}{path}")
        assert (gone.status_code, gone.json()) == (404, {"error": "Project not found"})
    assert (await api.delete(f"{PROJECTS}/{first['id']}")).status_code == 404
    assert await trail(api, first["id"]) == [
        ("project_created", f'Created project "demo" with repo {DEMO["repo_url"]}'),
        ("project_deleted", 'Deleted project "demo"'),
    ]


async def test_a_name_is_taken_once(api: httpx.AsyncClient) -> None:
    await project(api)
    again = await api.post(PROJECTS, json=DEMO | {"repo_url": "https://elsewhere/x.git"})
    assert again.status_code == 409
    assert again.json() == {"error": 'A project named "demo" exists already'}
    assert len((await api.get(PROJECTS)).json()) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (DEMO | {"name": "a/b"}, "name"),
        (DEMO | {"name": ""}, "name"),
        (DEMO | {"name": "x" * 257}, "name"),
        (DEMO | {"name": 5}, "name"),
        (DEMO | {"repo_url": "ftp://git.example/x"}, "repo_url"),
        (DEMO | {"repo_url": "https://x\n"}, "repo_url"),
        (DEMO | {"target_path": "a/../b"}, "target_path"),
        (DEMO | {"target_path": "a b"}, "target_path"),
        (DEMO | {"target_path": "x" * 513}, "target_path"),
        (DEMO | {"primary_node_id": ""}, "primary_node_id"),
        (DEMO | {"primary_node_id": "x" * 129}, "primary_node_id"),
        (DEMO | {"colour": "blue"}, None),
        ({"name": "demo"}, "repo_url"),
    ],
)
async def test_bad_input_is_a_400(
    api: httpx.AsyncClient, body: dict[str, Any], field: str | None
) -> None:
    refused = await api.post(PROJECTS, json=body)
    assert refused.status_code == 400, refused.text
    errors = refused.json()["error"]
    assert field in errors["fieldErrors"] if field else errors["formErrors"]
    assert (await api.get(PROJECTS)).json() == []


async def test_bad_action_bodies_are_a_400(api: httpx.AsyncClient) -> None:
    made = await project(api, primary_node_id="n1")
    for path, body in [
        ("clone", {"node_id": 5}),
        ("clone", {"node_id": "a/b"}),
        ("sync-memory", {"direction": "sideways"}),
        ("sync-memory", {"node": "n1"}),
    ]:
        refused = await api.post(f"{PROJECTS}/{made['id']}/{path}", json=body)
        assert refused.status_code == 400, (path, body, refused.text)
    assert (await detail(api, made["id"]))["clone_status"] == "pending"


async def test_a_clone_is_recorded_as_the_agent_answered(
    api: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(api, "n1", agent.url)
    made = await project(api, target_path="~/projects/demo")
    cloned = await api.post(f"{PROJECTS}/{made['id']}/clone", json={"node_id": "n1"})
    assert cloned.status_code == 200, cloned.text
    assert cloned.json() == {"status": "cloned", "node": "n1", "result": CLONED}
    [(path, headers, body)] = agent.other_calls
    assert (path, headers["x-membridge-agent"]) == ("/clone", node_agent_key(AGENT_KEY, "n1"))
    assert body == {"repo_url": DEMO["repo_url"], "project_name": "demo",
                    "target_path": "~/projects/demo"}  # fmt: skip
    found = await detail(api, made["id"])
    assert (found["clone_status"], found["primary_node_id"]) == ("cloned", "n1")
    [status] = found["nodes"]
    assert (status["node_id"], status["clone_status"], status["repo_path"]) == (
        "n1", "cloned", CLONED["path"],
    )  # fmt: skip
    assert status["last_sync_at"] is not None
    assert status["error_message"] is None
    assert (await trail(api, made["id"]))[-1] == ("project_cloned", 'Cloned "demo" on node n1')


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(200, {"ok": False, "action": "clone", "detail": "Clone failed (rc=128)"}),
         "Agent reported a failure: Clone failed (rc=128)"),
        (Answer(400, {"ok": False, "detail": "project_name: 1..128 letters"}),
         "Agent returned 400: project_name"),
    ],
    ids=["ok-false", "refused"],
)  # fmt: skip
async def test_a_failed_clone_leaves_project_and_node_failed(
    api: httpx.AsyncClient, agent: StandInAgent, answer: Answer, said: str
) -> None:
    await node(api, "n1", agent.url)
    made = await project(api, primary_node_id="n1")
    agent.answers["/clone"] = answer
    failed = await api.post(f"{PROJECTS}/{made['id']}/clone")
    assert failed.status_code == 502
    assert said in failed.json()["error"]
    found = await detail(api, made["id"])
    assert found["clone_status"] == "failed"
    assert said in found["error_message"]
    [status] = found["nodes"]
    assert (status["clone_status"], status["last_sync_at"]) == ("failed", None)
    assert said in status["error_message"]
    assert [a for a, _ in await trail(api, made["id"])] == ["project_created"]

    agent.answers["/clone"] = Answer(body=CLONED)
    assert (await api.post(f"{PROJECTS}/{made['id']}/clone")).status_code == 200
    found = await detail(api, made["id"])
    assert (found["clone_status"], found["error_message"]) == ("cloned", None)
    assert (found["nodes"][0]["clone_status"], found["nodes"][0]["error_message"]) == (
        "cloned", None,
    )  # fmt: skip


async def test_an_unreachable_agent_is_a_failure(api: httpx.AsyncClient) -> None:
    await node(api, "gone", f"http://127.0.0.1:{closed_port()}")
    made = await project(api)
    failed = await api.post(f"{PROJECTS}/{made['id']}/clone", json={"node_id": "gone"})
    assert failed.status_code == 502
    assert failed.json()["error"].startswith("Agent unreachable: ConnectError")
    found = await detail(api, made["id"])
    assert (found["clone_status"], found["nodes"][0]["clone_status"]) == ("failed", "failed")


async def test_a_clone_elsewhere_keeps_the_primary(
    api: httpx.AsyncClient, agent: StandInAgent
) -> None:
    await node(api, "n1", agent.url)
    await node(api, "n2", agent.url)
    kept = await project(api, primary_node_id="n1")
    assert (await api.post(f"{PROJECTS}/{kept['id']}/clone", json={"node_id": "n2"})).is_success
    assert (await detail(api, kept["id"]))["primary_node_id"] == "n1"
    unset = await project(api, name="unset")
    assert (await api.post(f"{PROJECTS}/{unset['id']}/clone", json={"node_id": "n2"})).is_success
    assert (await detail(api, unset["id"]))["primary_node_id"] == "n2", "the first becomes it"


async def test_a_clone_needs_a_known_node_with_an_agent(api: httpx.AsyncClient) -> None:
    made = await project(api)
    url = f"{PROJECTS}/{made['id']}/clone"
    nowhere = await api.post(url)
    assert (nowhere.status_code, nowhere.json()) == (400, {"error": (
        "No target node specified. Provide node_id in body or set primary_node_id on project."
    )})  # fmt: skip
    unknown = await api.post(url, json={"node_id": "nobody"})
    assert (unknown.status_code, unknown.json()) == (404, {"error": "Worker not found"})
    await node(api, "puller", None)
    no_url = await api.post(url, json={"node_id": "puller"})
    assert (no_url.status_code, no_url.json()) == (400, {"error": "Worker has no URL configured"})
    assert await detail(api, made["id"]) == made | {"nodes": []}, "nothing changed"
    assert (await api.post(f"{PROJECTS}/nope/clone", json={"node_id": "x"})).status_code == 404


async def test_propagation_is_partial_then_synced_then_has_nothing_to_do(
    api: httpx.AsyncClient, agent: StandInAgent, other_agent: StandInAgent
) -> None:
    await node(api, "n1", agent.url)
    await node(api, "n2", other_agent.url)
    await node(api, "puller", None)
    other_agent.answers["/clone"] = Answer(body={"ok": False, "detail": "Clone failed (rc=128)"})
    made = await project(api)
    url = f"{PROJECTS}/{made['id']}/propagate"

    partial = await api.post(url)
    assert partial.status_code == 200, partial.text
    failure = "Agent reported a failure: Clone failed (rc=128)"
    assert partial.json() == {"status": "partial", "results": [
        {"node_id": "n1", "status": "cloned"},
        {"node_id": "n2", "status": "failed", "error": failure},
    ]}  # fmt: skip
    found = await detail(api, made["id"])
    assert (found["clone_status"], found["error_message"]) == ("failed", "Clone failed on n2")
    assert found["primary_node_id"] is None
    states = {n["node_id"]: (n["clone_status"], n["error_message"]) for n in found["nodes"]}
    assert states == {"n1": ("cloned", None), "n2": ("failed", failure)}

    other_agent.answers["/clone"] = Answer(body=CLONED)
    synced = await api.post(url)
    assert synced.json() == {"status": "synced", "results": [{"node_id": "n2", "status": "cloned"}]}
    assert len(agent.other_calls) == 1, "n1 has the project already"
    assert (await detail(api, made["id"]))["clone_status"] == "synced"
    nothing = await api.post(url)
    assert nothing.json() == {
        "status": "nothing_to_propagate",
        "message": "All nodes already have this project",
    }
    assert [d for a, d in await trail(api, made["id"]) if a == "project_propagated"] == [
        "Propagated to 1/2 nodes",
        "Propagated to 1/1 nodes",
    ]


async def test_propagation_calls_agents_at_once_but_no_more_than_its_bound(
    api: httpx.AsyncClient, agent: StandInAgent
) -> None:
    hold = 0.4
    agent.answers["/clone"] = Answer(body=CLONED, hold_sec=hold)
    names = [f"n{i}" for i in range(PROPAGATE_AT_ONCE + 2)]
    for name in names:
        await node(api, name, agent.url)
    made = await project(api)
    started = time.monotonic()
    done = await api.post(f"{PROJECTS}/{made['id']}/propagate")
    took = time.monotonic() - started
    assert done.json()["status"] == "synced"
    assert agent.most_at_once == PROPAGATE_AT_ONCE
    assert 2 * hold <= took < len(names) * hold, "in two waves, not one after another"
    statuses = (await api.get(f"{PROJECTS}/{made['id']}/node-status")).json()
    assert sorted(s["node_id"] for s in statuses if s["clone_status"] == "cloned") == names


async def test_only_admins_manage_projects(api: httpx.AsyncClient) -> None:
    made = await project(api, primary_node_id="n1")
    credentials = api.app.state.container.credentials  # type: ignore[attr-defined]
    await node(api, "n1", None)
    keys = [
        (await credentials.create_key("v", Role.VIEWER)).secret,
        (await credentials.create_key("w", Role.WORKER, "n1")).secret,
    ]
    pid = made["id"]
    calls = [
        ("GET", PROJECTS, None), ("POST", PROJECTS, DEMO | {"name": "x"}),
        ("GET", f"{PROJECTS}/{pid}", None), ("DELETE", f"{PROJECTS}/{pid}", None),
        ("POST", f"{PROJECTS}/{pid}/clone", {}), ("POST", f"{PROJECTS}/{pid}/propagate", None),
        ("POST", f"{PROJECTS}/{pid}/sync-memory", {}),
        ("GET", f"{PROJECTS}/{pid}/node-status", None),
    ]  # fmt: skip
    for key in keys:
        for method, url, body in calls:
            refused = await api.request(method, url, json=body, headers={HEADER: key})
            assert refused.status_code == 403, (method, url)
    anonymous = await api.get(PROJECTS, headers={HEADER: ""})
    assert anonymous.status_code == 401
    assert await detail(api, pid) == made | {"nodes": []}


async def test_a_clone_onto_a_real_worker_with_real_git(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    server = GitServer(tmp_path / "git")
    server.start()
    try:
        url = server.repository("demo", {"README.md": "hello\n"})
        base = tmp_path / "node" / "projects"
        worker = WorkerSettings(
            name="n1", agent_port=free_port(), agent_key=AGENT_KEY, allow_clone=True,
            repos_base=base,
        )  # fmt: skip
        async with serving(AgentSurface(worker, runs_nothing, list)):
            await node(api, "n1", worker.advertised_agent_url)
            made = await project(api, repo_url=url, primary_node_id="n1")
            cloned = await api.post(f"{PROJECTS}/{made['id']}/clone")
            assert cloned.status_code == 200, cloned.text
            assert (base / "demo" / "README.md").read_text() == "hello\n"
            again = await api.post(f"{PROJECTS}/{made['id']}/clone")
            assert again.json()["result"]["action"] == "pull"
        [status] = (await detail(api, made["id"]))["nodes"]
        assert status["repo_path"] == str((base / "demo").resolve())
    finally:
        server.stop()


async def test_the_dashboard_lists_creates_clones_propagates_and_deletes(
    api: httpx.AsyncClient, agent: StandInAgent
) -> None:
    hx = {"HX-Request": "true"}
    form = hx | {"Content-Type": "application/x-www-form-urlencoded"}
    await node(api, "n1", agent.url)
    empty = await api.get("/projects")
    assert empty.status_code == 200
    assert "No projects yet" in empty.text
    assert '<option value="n1">n1</option>' in empty.text
    new = "name=demo&repo_url=https%3A%2F%2Fgit.example%2Fd.git"
    made = await api.post("/projects", headers=form, content=new)
    assert made.status_code == 200, made.text
    assert made.headers["hx-trigger"] == "bloom:changed"
    twice = await api.post("/projects", headers=form, content=new)
    assert (twice.status_code, twice.json()) == (
        409,
        {"error": 'A project named "demo" exists already'},
    )
    bad = await api.post("/projects", headers=form, content="name=a%2Fb&repo_url=x")
    assert bad.status_code == 400
    [project_id] = [p["id"] for p in (await api.get(PROJECTS)).json()]

    rows = await api.get("/projects", params={"part": "project_rows"}, headers=hx)
    assert f'hx-post="/projects/{project_id}/propagate"' in rows.text
    nowhere = await api.post(f"/projects/{project_id}/clone", headers=form, content="node_id=")
    assert nowhere.status_code == 400
    cloned = await api.post(f"/projects/{project_id}/clone", headers=form, content="node_id=n1")
    assert "Cloned on n1." in cloned.text
    assert (await detail(api, project_id))["primary_node_id"] == "n1"
    nothing = await api.post(f"/projects/{project_id}/propagate", headers=hx)
    assert "All nodes already have this project" in nothing.text
    agent.answers["/clone"] = Answer(body={"ok": False, "detail": "Clone failed (rc=128)"})
    await node(api, "n2", agent.url)
    partial = await api.post(f"/projects/{project_id}/propagate", headers=hx)
    assert "cloned on 0 of 1 nodes" in partial.text
    assert 'class="badge s-failed"' in (await api.get("/projects")).text
    removed = await api.post(f"/projects/{project_id}/remove", headers=hx)
    assert removed.status_code == 200
    assert (await api.get(PROJECTS)).json() == []
    assert (await api.post(f"/projects/{project_id}/remove")).status_code == 403, "not htmx"
