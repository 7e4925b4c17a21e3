"""The wire contract: the clients' parsers read the real replies of the in-process apps, so a
field renamed on one side fails here rather than in a worker at run time."""

import dataclasses
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.cli.task import task_body
from bloom.clients.membridge import MembridgeClient
from bloom.clients.runtime import RuntimeClient
from bloom.clients.wire import CompleteRequest, HeartbeatRequest, LeaseInfo
from bloom.domain.fleet import parse_agent
from bloom.domain.ids import canonical_id
from bloom.domain.retry import ErrorCode
from bloom.domain.states import LeaseStatus, ResultStatus, TaskStatus, WorkerStatus
from bloom.membridge.app import create_app as create_membridge
from bloom.worker.agent import Worker
from bloom.worker.settings import WorkerSettings
from tests.support.api import API
from tests.support.clock import FakeClock
from tests.support.membridge import membridge_settings

REGISTRATION = {"name": "w1", "capabilities": {"max_concurrency": 2, "labels": ["gpu"]}}


@pytest.fixture
async def runtime(client: httpx.AsyncClient) -> AsyncIterator[RuntimeClient]:
    """The runtime's client, on the in-process app."""
    transport = httpx.ASGITransport(app=client.app)  # type: ignore[attr-defined]
    async with RuntimeClient("http://runtime", transport=transport) as runtime:
        yield runtime


@pytest.fixture
async def membridge(
    membridge_db_url: str, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[MembridgeClient]:
    """Membridge's client, on the in-process Membridge app."""
    app = create_membridge(membridge_settings(membridge_db_url, tmp_path))
    async with app.router.lifespan_context(app):

        async def credentials() -> tuple[str, str]:
            return "http://membridge", ""

        transport = httpx.ASGITransport(app=app)
        client = MembridgeClient(credentials, clock, retries=0, transport=transport)
        yield client
        await client.close()


WHEN_SO = {"hold", "stall"}
"""Fields the server sends only when they apply (a held task's `hold`, a stalled one's `stall`):
tested where they do."""


def sent_every_field(value: Any, raw: Mapping[str, Any]) -> bool:
    """Every field the parser reads is one the server sent (optional ones included)."""
    names = {field.name for field in dataclasses.fields(value)} - {"raw"} - WHEN_SO
    return names <= raw.keys()


async def test_a_lifecycle_parses_into_the_wire_types(
    runtime: RuntimeClient, client: httpx.AsyncClient
) -> None:
    worker = await runtime.register_worker(REGISTRATION)
    assert (worker.id, worker.status, worker.labels) == ("w1", WorkerStatus.ONLINE, ("gpu",))
    assert worker.capabilities["max_concurrency"] == 2
    body = task_body(
        "hi",
        context="c1",
        timeout=60,
        budget=0.5,
        priority=5,
        hints=["a.md"],
        idempotency_key="k1",
        stall_sec=300,
        on_stall="retry",
    )
    body["policy"]["tools"] = {"allow": ["Read"], "deny": ["Bash(rm:*)"], "max_turns": 3}
    created = await runtime.create_task(body)
    assert created.status is TaskStatus.QUEUED
    assert (created.context_id, created.agent_slug, created.prompt) == ("c1", "default", "hi")
    assert (created.policy.timeout_sec, created.policy.budget) == (60, 0.5)
    assert (created.policy.stall_sec, created.policy.on_stall) == (300, "retry")
    assert (created.priority, created.context_hints, created.idempotency_key) == (
        5,
        ("a.md",),
        "k1",
    )
    assert (created.attempts, created.max_attempts, created.lease_id) == (0, 3, None)
    assert sent_every_field(created, created.raw)
    assert sent_every_field(created.policy, created.raw["policy"])
    assert created.policy.tools is not None
    assert (created.policy.tools.allow, created.policy.tools.deny) == (("Read",), ("Bash(rm:*)",))
    assert created.policy.tools.max_turns == 3

    grant = await runtime.claim("w1", wait_sec=0, ttl_sec=60)
    assert grant is not None
    assert (grant.task.id, grant.task.status, grant.task.attempts) == (
        created.id,
        TaskStatus.LEASED,
        1,
    )
    lease = grant.lease
    assert (lease.task_id, lease.worker_id, lease.status) == (created.id, "w1", LeaseStatus.ACTIVE)
    assert (lease.ttl_seconds, lease.context_id) == (60, "c1")
    assert lease.expires_at > lease.started_at == lease.last_heartbeat
    leases = (await client.get(f"{API}/leases")).json()
    assert sent_every_field(lease, leases[0])
    assert LeaseInfo.from_json(leases[0]) == lease

    beat = await runtime.heartbeat(created.id, HeartbeatRequest(lease.id, "w1"))
    assert (beat.lease.id, beat.expires_at) == (lease.id, beat.lease.expires_at)
    assert (beat.cancel_requested, beat.task_status) == (False, TaskStatus.RUNNING)
    accepted = await runtime.send_events(created.id, lease.id, "w1", [{"type": "x", "data": 1}])
    assert (accepted.task_id, accepted.accepted, accepted.last_seq) == (created.id, 1, 1)

    request = CompleteRequest(
        lease.id, "w1", ResultStatus.SUCCESS, {"duration_ms": 5}, output="hello", session_id="s1"
    )
    done = await runtime.complete(created.id, request)
    assert (done.task.status, done.task.session_id) == (TaskStatus.COMPLETED, "s1")
    assert (done.result.status, done.result.task_id) == (ResultStatus.SUCCESS, created.id)
    assert done.artifact is not None
    assert done.result.artifact_id == done.artifact.id

    got = await runtime.get_task(created.id)
    assert (got.status, got.lease_id, got.worker_id) == (TaskStatus.COMPLETED, lease.id, "w1")
    assert [task.id for task in await runtime.list_tasks(status="completed")] == [created.id]
    (artifact,) = await runtime.artifacts(created.id)
    assert (artifact.id, artifact.task_id, artifact.type) == (
        done.artifact.id,
        created.id,
        "LLM_RESULT",
    )
    assert sent_every_field(artifact, artifact.raw)
    assert await runtime.artifact_content(artifact.id) == "hello"
    (listed,) = await runtime.list_workers()
    assert (listed.id, listed.active_leases) == ("w1", 0)
    kinds = [event.type async for event in runtime.events(created.id, follow=False)]
    assert kinds == ["x", "end"]
    health = await runtime.health()
    assert (health.status, health.service) == ("ok", "bloom-runtime")

    await runtime.set_budget("default", daily_usd=0, monthly_usd=None)
    waiting = await runtime.get_task((await runtime.create_task(task_body("later"))).id)
    assert waiting.hold is not None
    assert (waiting.hold.project, waiting.hold.reason) == ("default", "budget_exhausted")
    assert sent_every_field(waiting.hold, waiting.raw["hold"])


def failure(lease_id: str, code: ErrorCode) -> CompleteRequest:
    return CompleteRequest(
        lease_id, "w1", ResultStatus.ERROR, {"duration_ms": 1}, error_message="no", error_code=code
    )


async def test_cancel_and_requeue_parse_into_the_wire_types(runtime: RuntimeClient) -> None:
    await runtime.register_worker(REGISTRATION)
    first = await runtime.create_task(task_body("one"))
    grant = await runtime.claim("w1", wait_sec=0)
    assert grant is not None
    cancelling = await runtime.cancel_task(first.id)
    assert (cancelling.status, cancelling.cancel_requested) == (TaskStatus.LEASED, True)
    beat = await runtime.heartbeat(first.id, HeartbeatRequest(grant.lease.id, "w1"))
    assert (beat.cancel_requested, beat.task_status) == (True, TaskStatus.RUNNING)
    done = await runtime.complete(first.id, failure(grant.lease.id, ErrorCode.CANCELLED))
    assert (done.task.status, done.task.last_error, done.artifact) == (
        TaskStatus.CANCELLED,
        "no",
        None,
    )
    assert done.result.error_code == "cancelled"

    second = await runtime.create_task(task_body("two"))
    grant = await runtime.claim("w1", wait_sec=0)
    assert grant is not None
    done = await runtime.complete(second.id, failure(grant.lease.id, ErrorCode.FATAL))
    assert done.task.status is TaskStatus.FAILED
    assert (await runtime.requeue_task(second.id)).status is TaskStatus.QUEUED
    assert (await runtime.cancel_task(second.id)).status is TaskStatus.CANCELLED


async def test_the_workers_membridge_calls_parse_into_the_wire_types(
    membridge: MembridgeClient, tmp_path: Path
) -> None:
    settings = WorkerSettings(name="w1", data_dir=tmp_path, max_concurrency=2)
    async with RuntimeClient("http://runtime") as runtime:
        registration = Worker(settings, runtime).registration(readiness=False)  # as to Membridge
    agent = await membridge.register_agent(registration)
    assert agent is not None
    assert (agent.name, agent.status, agent.capabilities["max_concurrency"]) == ("w1", "online", 2)
    beat = {"node_id": "w1", "canonical_id": canonical_id("proj"), "project_id": "proj"}
    role = await membridge.node_heartbeat(beat)
    assert role is not None
    assert (role.canonical_id, role.role) == (canonical_id("proj"), "unknown")  # none chosen
    assert await membridge.node_heartbeat({"node_id": "w1"}) is None  # refused: no project

    listing = (await membridge.request("GET", "/agents")).json()  # as the worker sync reads it
    (synced,) = [parse_agent(raw) for raw in listing]
    assert synced is not None
    assert (synced.id, synced.status, synced.capabilities["max_concurrency"]) == ("w1", "online", 2)
    assert synced.last_seen is not None
