"""A managed project's memory synced through a real Membridge (served over HTTP from a thread,
on SQLite), which asks a stand-in node agent: the body Membridge reads (`{project, agent}`),
the answer and its audit; Membridge's refusal and a failed sync are 502s naming why."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.settings import RuntimeSettings
from tests.support.agent import Answer, StandInAgent
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.membridge import membridge_settings
from tests.support.threaded import ThreadedServer

PROJECTS = f"{API}/projects"


@pytest.fixture
def agent() -> Iterator[StandInAgent]:
    served = StandInAgent()
    served.start()
    yield served
    served.stop()


@pytest.fixture
def membridge(
    membridge_sqlite_template: Path, tmp_path: Path, agent: StandInAgent
) -> Iterator[str]:
    """Membridge knowing node n1 (the stand-in agent) and project mem; its URL."""
    db = tmp_path / "membridge.db"
    shutil.copyfile(membridge_sqlite_template, db)
    server = ThreadedServer(create_membridge(membridge_settings(f"sqlite:///{db}", tmp_path)))
    server.start()
    with httpx.Client(base_url=server.url) as http:
        assert http.post("/agents", json={"name": "n1", "url": agent.url}).is_success
        assert http.post("/projects", json={"name": "mem"}).status_code == 201
    yield server.url
    server.stop()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, membridge: str) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, membridge_server_url=membridge)


async def project(client: httpx.AsyncClient, name: str, primary: str | None) -> str:
    body = {"name": name, "repo_url": "https://git.example/m.git", "primary_node_id": primary}
    made = await client.post(PROJECTS, json={k: v for k, v in body.items() if v})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_a_push_through_membridge(client: httpx.AsyncClient, agent: StandInAgent) -> None:
    pid = await project(client, "mem", "n1")
    pushed = await client.post(f"{PROJECTS}/{pid}/sync-memory")
    assert pushed.status_code == 200, pushed.text
    answer = pushed.json()
    assert (answer["status"], answer["direction"], answer["node"]) == ("ok", "push", "n1")
    result = answer["result"]
    assert (result["ok"], result["project"], result["agent"]) == (True, "mem", "n1")
    assert result["job_id"]
    [(path, _, body)] = agent.other_calls
    assert (path, body) == ("/sync/push", {"project": "mem"})
    entries = (await client.get(f"{API}/audit")).json()
    assert (entries[0]["action"], entries[0]["entity_id"], entries[0]["detail"]) == (
        "memory_sync_push", pid, 'Memory push of "mem" on node n1',
    )  # fmt: skip


async def test_a_failed_sync_and_membridges_refusal_are_502s(
    client: httpx.AsyncClient, agent: StandInAgent
) -> None:
    pid = await project(client, "mem", None)
    url = f"{PROJECTS}/{pid}/sync-memory"
    nowhere = await client.post(url, json={"direction": "pull"})
    assert (nowhere.status_code, nowhere.json()) == (400, {"error": "No target node specified"})

    refusal = {"ok": False, "returncode": 2, "detail": "primary refused pull"}
    agent.answers["/sync/pull"] = Answer(body=refusal)
    refused = await client.post(url, json={"direction": "pull", "node_id": "n1"})
    assert refused.status_code == 502
    assert refused.json() == {"error": "Memory pull failed on node n1: primary refused pull"}

    unknown = await client.post(url, json={"node_id": "n9"})
    assert unknown.status_code == 502
    assert unknown.json() == {"error": "Membridge returned 404: Agent 'n9' not found"}
    other = await project(client, "not at membridge", "n1")
    missing = await client.post(f"{PROJECTS}/{other}/sync-memory")
    assert missing.json() == {
        "error": "Membridge returned 404: Project 'not at membridge' not found"
    }
    actions = [e["action"] for e in (await client.get(f"{API}/audit")).json()]
    assert not [a for a in actions if a.startswith("memory_sync")]
