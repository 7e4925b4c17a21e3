"""The clients' parsers: unknown fields pass (a newer server), a missing, renamed or mistyped one
is a `RuntimeContractError` that names it."""

from typing import Any

import httpx
import pytest

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeContractError
from bloom.clients.wire import Policy, TaskInfo
from tests.support.wire import task_json

LEASE = {
    "id": "l1",
    "task_id": "t1",
    "worker_id": "w1",
    "status": "active",
    "started_at": 1,
    "expires_at": 2,
    "ttl_seconds": 300,
    "last_heartbeat": 1,
    "context_id": "c",
}


async def claimed(reply: Any) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=reply))
    async with RuntimeClient("http://runtime", transport=transport) as client:
        await client.claim("w1", wait_sec=0)


def without(data: dict[str, Any], name: str, renamed: str | None = None) -> dict[str, Any]:
    rest = {key: value for key, value in data.items() if key != name}
    return rest | ({renamed: data[name]} if renamed else {})


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            {"lease": LEASE, "task": without(task_json(), "status", renamed="state")},
            "task.status: missing, expected a string",
        ),
        ({"lease": without(LEASE, "id"), "task": task_json()}, "lease.id: missing"),
        (
            {"lease": LEASE | {"expires_at": "2"}, "task": task_json()},
            "lease.expires_at: expected an integer, got str",
        ),
        (
            {"lease": LEASE, "task": task_json(attempts=True)},
            "task.attempts: expected an integer, got bool",
        ),
        (
            {"lease": LEASE, "task": task_json(status="paused")},
            "task.status: unknown TaskStatus 'paused'",
        ),
        ({"lease": LEASE, "task": task_json(policy={"budget": "1"})}, "task.policy.budget"),
        ({"lease": LEASE, "task": task_json(context_hints=[1])}, "task.context_hints[0]"),
        ({"lease": LEASE}, "task: missing, expected an object"),
        ([], "the reply: expected an object, got list"),
    ],
)
async def test_a_reply_of_another_shape_names_the_field(reply: Any, message: str) -> None:
    with pytest.raises(
        RuntimeContractError, match="unexpected reply to POST /workers/w1/claim"
    ) as caught:
        await claimed(reply)
    assert message in caught.value.message
    assert isinstance(caught.value, RuntimeApiError)  # callers' handling of refusals holds


async def test_a_reply_that_is_not_json_is_a_contract_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>"))
    async with RuntimeClient("http://runtime", transport=transport) as client:
        with pytest.raises(RuntimeContractError, match="GET /llm-tasks/t1: not JSON"):
            await client.get_task("t1")


def test_unknown_fields_pass_and_optional_ones_take_the_servers_defaults() -> None:
    task = TaskInfo.from_json(task_json(policy={}, shiny_new_field={"x": 1}))
    assert task.policy == Policy(timeout_sec=120, budget=0.0)
    assert (task.priority, task.cancel_requested, task.last_error) == (0, False, None)
    assert task.raw["shiny_new_field"] == {"x": 1}
