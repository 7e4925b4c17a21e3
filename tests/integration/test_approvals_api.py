"""Approvals (issue 33) through the HTTP API on both databases: an attempt that stops at a call
in `ask` parks its task in `awaiting_approval` (its lease ended, its attempt not counted), the
approval listed; one decision puts the task back in the queue, a second or late one is a 409;
the resumed run reads the decisions; the timeout denies or fails; a cancel closes the call;
approvers decide, viewers and workers do not."""

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.identity import Role
from bloom.runtime.app import create_app
from tests.support.access import HEADER
from tests.support.api import API, claim, create_task, register_worker
from tests.support.clock import FakeClock
from tests.support.databases import make_settings

ASKING = {"tools": {"ask": ["Bash(git push:*)"], "approval_timeout_sec": 60}}
CALL = {
    "tool_use_id": "toolu_1",
    "tool_name": "Bash",
    "tool_input": {"command": "git push origin main"},
    "session_id": "s-1",
    "reason": "Bash(git push:*) is in ask",
}


def stopped_at(lease_id: str, call: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete saying the run stopped at `call`, waiting for a decision."""
    return {
        "status": "error",
        "error_message": "Waiting for approval: Bash: git push origin main",
        "error_code": "approval_required",
        "metrics": {"duration_ms": 5},
        "lease_id": lease_id,
        "session_id": "s-1",
        "approval": call or CALL,
    }


async def parked(client: httpx.AsyncClient, **policy: Any) -> tuple[str, dict[str, Any]]:
    """A task of `ask` rules whose run stopped at CALL: its id and its approval."""
    await register_worker(client, "w1")
    task = await create_task(client, policy=ASKING | policy, context_id="ctx-a")
    grant = await claim(client, "w1")
    assert grant is not None
    done = await client.post(
        f"{API}/llm-tasks/{task['id']}/complete", json=stopped_at(grant["lease"]["id"])
    )
    assert done.status_code == 200, done.text
    assert done.json()["task"]["status"] == "awaiting_approval"
    (approval,) = (await client.get(f"{API}/approvals?status=pending")).json()
    return task["id"], approval


async def decide(client: httpx.AsyncClient, approval_id: str, **body: Any) -> httpx.Response:
    return await client.post(f"{API}/approvals/{approval_id}/decision", json=body)


async def test_a_call_in_ask_parks_the_task_without_its_worker(client: httpx.AsyncClient) -> None:
    task_id, approval = await parked(client)
    assert approval["task_id"] == task_id
    assert approval["attempt"] == 1
    assert (approval["tool_name"], approval["tool_input"]) == ("Bash", CALL["tool_input"])
    assert approval["status"] == "pending"
    assert approval["summary"] == "Bash: git push origin main"
    assert approval["expires_at"] - approval["requested_at"] == 60_000
    task = (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    assert task["status"] == "awaiting_approval"
    assert task["lease_id"] is None
    assert task["attempts"] == 0
    worker = (await client.get(f"{API}/workers/w1")).json()
    assert worker.get("active_leases", 0) == 0
    # nothing to claim while it waits
    assert await claim(client, "w1") is None
    scrape = (await client.get("/metrics")).text
    assert "bloom_approvals_pending 1.0" in scrape
    stats = (await client.get(f"{API}/stats")).json()
    assert stats["tasks"]["by_status"]["awaiting_approval"] == 1
    events = (await client.get(f"{API}/llm-tasks/{task_id}/events?follow=false")).text
    assert "approval_requested" in events
    audit = (await client.get(f"{API}/audit?task_id={task_id}")).json()
    assert "approval_requested" in {entry["action"] for entry in audit}


async def test_one_decision_resumes_the_task_and_a_second_is_refused(
    client: httpx.AsyncClient,
) -> None:
    task_id, approval = await parked(client)
    decided = await decide(client, approval["id"], decision="approve", note="go")
    assert decided.status_code == 200, decided.text
    assert decided.json()["status"] == "approved"
    assert decided.json()["decided_by"]
    assert (await client.get(f"{API}/llm-tasks/{task_id}")).json()["status"] == "queued"
    assert "bloom_approvals_pending 0.0" in (await client.get("/metrics")).text
    again = await decide(client, approval["id"], decision="deny", note="no")
    assert again.status_code == 409, again.text
    assert "already approved" in again.text
    # the resumed run is granted to a worker, and reads the decision for exactly that call
    grant = await claim(client, "w1")
    assert grant is not None
    assert grant["task"]["id"] == task_id
    rulings = (await client.get(f"{API}/llm-tasks/{task_id}/decisions")).json()["decisions"]
    assert [(r["tool_use_id"], r["decision"], r["session_id"]) for r in rulings] == [
        ("toolu_1", "approve", "s-1")
    ]
    assert (await decide(client, "nope", decision="approve")).status_code == 404


async def test_a_denial_carries_its_note_and_remember_is_for_approvals(
    client: httpx.AsyncClient,
) -> None:
    task_id, approval = await parked(client)
    refused = await decide(client, approval["id"], decision="deny", remember=True)
    assert refused.status_code == 400
    assert (await decide(client, approval["id"], decision="maybe")).status_code == 400
    denied = await decide(client, approval["id"], decision="deny", note="not on prod")
    assert denied.json()["status"] == "denied"
    (ruling,) = (await client.get(f"{API}/llm-tasks/{task_id}/decisions")).json()["decisions"]
    assert (ruling["decision"], ruling["note"]) == ("deny", "not on prod")


async def test_a_remembered_approval_reaches_the_contexts_later_tasks(
    client: httpx.AsyncClient,
) -> None:
    _, approval = await parked(client)
    await decide(client, approval["id"], decision="approve", remember=True)
    later = await create_task(client, policy=ASKING, context_id="ctx-a")
    other = await create_task(client, policy=ASKING, context_id="ctx-b")
    (ruling,) = (await client.get(f"{API}/llm-tasks/{later['id']}/decisions")).json()["decisions"]
    assert ruling["remember"] is True
    assert ruling["tool_input"] == CALL["tool_input"]
    assert (await client.get(f"{API}/llm-tasks/{other['id']}/decisions")).json()["decisions"] == []


@pytest.mark.parametrize("on_timeout", ["deny", "fail"])
async def test_no_decision_in_time_denies_or_fails(
    client: httpx.AsyncClient, clock: FakeClock, on_timeout: str
) -> None:
    task_id, approval = await parked(client, tools=ASKING["tools"] | {"on_timeout": on_timeout})
    approvals = client.app.state.container.approvals  # type: ignore[attr-defined]
    clock.advance(59)
    assert await approvals.expire_due() == 0
    clock.advance(2)
    assert await approvals.expire_due() == 1
    expired = (await client.get(f"{API}/approvals/{approval['id']}")).json()
    assert expired["status"] == "expired"
    assert expired["decided_by"] == "runtime"
    task = (await client.get(f"{API}/llm-tasks/{task_id}")).json()
    if on_timeout == "fail":
        assert task["status"] == "failed"
        assert "No decision on Bash: git push origin main in time" in task["last_error"]
    else:
        assert task["status"] == "queued"
        (ruling,) = (await client.get(f"{API}/llm-tasks/{task_id}/decisions")).json()["decisions"]
        assert ruling["decision"] == "deny"
        assert "No decision came in time" in ruling["note"]
    late = await decide(client, approval["id"], decision="approve")
    assert late.status_code == 409


async def test_cancel_while_waiting_ends_the_task_and_its_call(client: httpx.AsyncClient) -> None:
    task_id, approval = await parked(client)
    cancelled = await client.post(f"{API}/llm-tasks/{task_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    closed = (await client.get(f"{API}/approvals/{approval['id']}")).json()
    assert (closed["status"], closed["note"]) == ("expired", "The task was cancelled")
    assert (await decide(client, approval["id"], decision="approve")).status_code == 409


async def test_a_complete_replayed_makes_one_approval_and_bad_ones_are_400(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    task = await create_task(client, policy=ASKING)
    grant = await claim(client, "w1")
    assert grant is not None
    lease_id = grant["lease"]["id"]
    url = f"{API}/llm-tasks/{task['id']}/complete"
    no_call = stopped_at(lease_id) | {"approval": None}
    assert (await client.post(url, json=no_call)).status_code == 400
    stray = stopped_at(lease_id) | {"error_code": "error"}
    assert (await client.post(url, json=stray)).status_code == 400
    for _ in range(2):
        assert (await client.post(url, json=stopped_at(lease_id))).status_code == 200
    assert len((await client.get(f"{API}/approvals")).json()) == 1
    assert (await client.get(f"{API}/approvals?status=later")).status_code == 400


async def test_approvers_decide_viewers_read_and_workers_do_neither(
    database_url: str, tmp_path: Path
) -> None:
    app = create_app(make_settings(database_url, tmp_path, api_key="admin-key"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        admin = {HEADER: "admin-key"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://runtime", headers=admin
        ) as client:
            _, approval = await parked(client)
            credentials = app.state.container.credentials
            keys = {
                role: {HEADER: (await credentials.create_key(role, Role(role), worker)).secret}
                for role, worker in (("viewer", None), ("approver", None), ("worker", "w1"))
            }
            url = f"{API}/approvals/{approval['id']}/decision"
            body = {"decision": "approve"}
            listed = await client.get(f"{API}/approvals", headers=keys["viewer"])
            assert listed.status_code == 200
            assert (await client.post(url, json=body, headers=keys["viewer"])).status_code == 403
            assert (await client.post(url, json=body, headers=keys["worker"])).status_code == 403
            listed = await client.get(f"{API}/approvals", headers=keys["worker"])
            assert listed.status_code == 403
            decided = await client.post(url, json=body, headers=keys["approver"])
            assert decided.status_code == 200, decided.text
            assert decided.json()["decided_by"] == "key:approver"


class Receiver:
    """A real HTTP server on loopback that answers the webhook's POSTs as told, and keeps them."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("allow_private", [True, False])
async def test_the_webhook_hears_of_each_call_signed_and_retried(
    database_url: str, tmp_path: Path, allow_private: bool
) -> None:
    receiver = Receiver([500, 302, 200])
    clock = FakeClock()
    settings = make_settings(
        database_url,
        tmp_path,
        approvals_webhook_url=receiver.url,
        approvals_webhook_secret="s3cret",
        approvals_webhook_allow_private=allow_private,
        public_url="https://bloom.example",
    )
    app = create_app(settings, clock=clock)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as client:
                _, approval = await parked(client)
                webhook = app.state.container.approval_webhook
                for _ in range(3):  # a 500, a redirect (never followed), then delivered
                    await webhook.step()
                    clock.advance(3600)
                assert await webhook.step() == 0  # nothing more to send
    finally:
        receiver.close()
    if not allow_private:
        assert receiver.received == []  # a loopback address is refused
        return
    assert len(receiver.received) == 3
    headers, body = receiver.received[-1]
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Bloom-Signature"] == expected
    assert headers["X-Bloom-Event"] == "approval_requested"
    sent = json.loads(body)
    assert sent["approval"]["id"] == approval["id"]
    assert sent["approval"]["summary"] == "Bash: git push origin main"
    assert sent["task_url"] == f"https://bloom.example/tasks/{approval['task_id']}"


async def test_an_approval_is_taken_by_one_run_and_a_later_one_is_told_it_was_interrupted(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    task_id, approval = await parked(client)
    await decide(client, approval["id"], decision="approve")
    first = await claim(client, "w1")
    assert first is not None
    url = f"{API}/llm-tasks/{task_id}/decisions"
    taken = await client.post(url, json={"lease_id": first["lease"]["id"]})
    assert [r["decision"] for r in taken.json()["decisions"]] == ["approve"]
    again = await client.post(url, json={"lease_id": first["lease"]["id"]})  # the same run
    assert [r["decision"] for r in again.json()["decisions"]] == ["approve"]
    # that run is lost (its lease lapses); the next run is not given the approval again
    clock.advance(400)
    await client.app.state.container.reaper.reap_once()  # type: ignore[attr-defined]
    second = await claim(client, "w1")
    assert second is not None
    assert second["task"]["id"] == task_id
    stale = await client.post(url, json={"lease_id": first["lease"]["id"]})
    assert stale.status_code == 409
    later = await client.post(url, json={"lease_id": second["lease"]["id"]})
    (ruling,) = later.json()["decisions"]
    assert ruling["decision"] == "deny"
    assert "not run again without a new decision" in ruling["note"]
