"""Schemathesis against both servers' OpenAPI documents, in-process (ASGI), on both databases.

Every operation gets generated requests, valid and invalid, and each answer must be no 5xx, a
status the document declares, with the declared content type and a body that matches the
declared schema. Bounded and deterministic: a fixed number of examples per operation,
derandomized, no example database; the claim's long-poll is made not to wait, and the events
stream is read once (`follow=false`), so that nothing blocks.

The documents are the apps' own (`app.openapi()`, what `/api/openapi.json` and `/openapi.json`
serve); each test item runs against a fresh app on a fresh database of each kind. The runtime's
Membridge proxy forwards to a real Membridge process, so its answers are Membridge's, not 502s.

Random ids name nothing, so the runtime starts with a worker, a queued, a leased and a completed
task (with its artifact) and a project, and a generated id is swapped for one of these by a
fixed rule (its length), so that the operations also meet things in every state, with generated
bodies.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import get_client, shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bloom.membridge.app import create_app as create_membridge
from bloom.runtime.app import create_app as create_runtime
from tests.support.agent import Answer, StandInAgent
from tests.support.databases import make_settings
from tests.support.membridge import ADMIN_KEY, MembridgeProcess, membridge_settings

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES = settings(
    max_examples=15,  # derandomized: the same cases every run, every route on both databases
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
BASE_URL = "http://testserver"
# What the apps serve does not depend on the database: documents from unstarted apps.
UNUSED = Path("/nonexistent")
RUNTIME = schemathesis.openapi.from_dict(
    create_runtime(make_settings("sqlite:///unused.db", UNUSED, secret_key="k" * 32)).openapi()
)
MEMBRIDGE = schemathesis.openapi.from_dict(
    create_membridge(membridge_settings("sqlite:///unused.db", UNUSED)).openapi()
)


@pytest.fixture(scope="module")
def agent() -> Iterator[StandInAgent]:
    """The world's worker's node agent: takes every dispatched task, answers every action."""
    served = StandInAgent()
    served.answer = Answer(body={"ok": True, "accepted": True})
    served.start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def membridge_process(
    tmp_path_factory: pytest.TempPathFactory, agent: StandInAgent
) -> Iterator[MembridgeProcess]:
    """Membridge, knowing the world's worker (its agent) and project, so that a memory sync of
    the project on its primary succeeds."""
    process = MembridgeProcess(
        tmp_path_factory.mktemp("membridge"), BLOOM_MEMBRIDGE_RATE_LIMIT_ENABLED="false"
    )
    process.start()
    with process.client() as http:
        assert http.post("/agents", json={"name": "w0", "url": agent.url}).is_success
        assert http.post("/projects", json={"name": "demo"}).status_code == 201
    yield process
    process.stop()


@dataclass
class Seeded:
    app: FastAPI
    ids: dict[str, list[str]]
    """Path parameter → the existing things it may name."""


def seed(app: FastAPI, agent_url: str) -> dict[str, list[str]]:
    """A worker (with a node agent), tasks queued, leased and completed, and a project whose
    primary is the worker, made through the API itself."""
    # starts the app in schemathesis' own event loop (its ASGI types are narrower than ours)
    with get_client(app) as http:  # type: ignore[arg-type]

        def post(path: str, body: dict[str, Any], *status: int) -> dict[str, Any]:
            response = http.post(f"/api/runtime{path}", json=body)
            assert response.status_code in (status or (200,)), response.text
            answer: dict[str, Any] = response.json()
            return answer

        w0 = {"name": "w0", "url": agent_url, "capabilities": {"max_concurrency": 3}}
        # 200 when the worker sync, starting with the app, has just listed it from Membridge
        worker = post("/workers", w0, 201, 200)
        task = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
        queued, leased, done = (post("/llm-tasks", task, 201) for _ in range(3))
        lease = post(f"/llm-tasks/{leased['id']}/lease", {}, 201)["lease"]
        post(f"/llm-tasks/{done['id']}/lease", {}, 201)
        completed = post(
            f"/llm-tasks/{done['id']}/complete",
            {"status": "success", "output": "done", "metrics": {"duration_ms": 1}},
        )
        demo = {"name": "demo", "repo_url": "https://git.example/demo.git", "primary_node_id": "w0"}
        project = post("/projects", demo, 201)
    tasks = [queued["id"], leased["id"], done["id"]]
    return {
        "task_id": tasks,
        "worker_id": [worker["id"]],
        "artifact_id": [completed["artifact"]["id"]],
        "lease_id": [lease["id"]],
        "project_id": [project["id"]],
    }


def steer(case: Any, ids: dict[str, list[str]]) -> None:
    """Swap generated ids for existing ones, by their length: one in (n + 1) stays as it is."""
    for name, value in (case.path_parameters or {}).items():
        choices = ids.get(name)
        if choices and isinstance(value, str) and len(value) % (len(choices) + 1):
            case.path_parameters[name] = choices[len(value) % (len(choices) + 1) - 1]
    if isinstance(case.body, dict):
        for name in ("lease_id", "worker_id"):
            value = case.body.get(name)
            if isinstance(value, str) and len(value) % 2:
                case.body[name] = ids[name][0]


@pytest.fixture
def runtime_app(
    database_url: str, tmp_path: Path, membridge_process: MembridgeProcess, agent: StandInAgent
) -> Iterator[Seeded]:
    app = create_runtime(
        make_settings(
            database_url,
            tmp_path,
            claim_wait_sec=0,
            rate_limit_enabled=False,
            membridge_server_url=membridge_process.url,
            membridge_admin_key=ADMIN_KEY,
        )
    )
    yield Seeded(app, seed(app, agent.url))
    shutdown_lifespans()  # its storage closes before the database goes away


@pytest.fixture
def membridge_app(membridge_db_url: str, tmp_path: Path) -> Iterator[FastAPI]:
    yield create_membridge(membridge_settings(membridge_db_url, tmp_path, rate_limit_enabled=False))
    shutdown_lifespans()


@RUNTIME.parametrize()
@EXAMPLES
def test_runtime_answers_as_documented(case: Any, runtime_app: Seeded) -> None:
    steer(case, runtime_app.ids)
    if case.path.endswith("/claim") and isinstance(case.body, dict):
        case.body["wait_seconds"] = 0  # a valid claim is a long poll
    if case.path.endswith("/sync-memory") and isinstance(case.body, dict):
        case.body.pop("node_id", None)  # Membridge knows the primary only (another: a 502)
    if case.method == "GET" and case.path.endswith("/events"):
        case.query = {**(case.query or {}), "follow": "false"}
    case.call_and_validate(app=runtime_app.app, base_url=BASE_URL, checks=CHECKS)


@MEMBRIDGE.parametrize()
@EXAMPLES
def test_membridge_answers_as_documented(case: Any, membridge_app: FastAPI) -> None:
    case.call_and_validate(app=membridge_app, base_url=BASE_URL, checks=CHECKS)
