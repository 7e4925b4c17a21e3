"""Request bodies: every body is checked, and refusals use zod's flattened 400 shape
`{"error": {"formErrors": [...], "fieldErrors": {"<top-level field>": [...]}}}`."""

from typing import Any

import httpx
import pytest

from tests.integration.validation.requests import World, assert_field_error
from tests.support.api import API, create_task, register_worker

TASK = {"context_id": "ctx-1", "agent_slug": "default", "prompt": "Say hello"}

COMPLETE = {"status": "success", "output": "done", "metrics": {"duration_ms": 5}}

WORKER = {"name": "w-new"}

CONFIG = {"membridge_server_url": "http://membridge:8000", "admin_key": "admin-key-123"}

MALFORMED = "Malformed JSON body"

NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"

ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "create": ("/llm-tasks", TASK),
    "lease": ("/llm-tasks/{queued}/lease", {}),
    "heartbeat": ("/llm-tasks/{leased}/heartbeat", {}),
    "complete": ("/llm-tasks/{leased}/complete", COMPLETE),
    "register": ("/workers", WORKER),
    "claim": ("/workers/w1/claim", {"wait_seconds": 0}),
    "config": ("/config", CONFIG),
}


def url(world: World, route: str) -> str:
    path = ROUTES[route][0].format(queued=world.queued["id"], leased=world.leased["id"])
    return f"{API}{path}"


def body(route: str, changes: dict[str, Any]) -> dict[str, Any]:
    return ROUTES[route][1] | changes


WRONG_VALUES: list[tuple[str, dict[str, Any], str]] = [
    # create (seed insertLLMTaskSchema, plus priority and idempotency_key)
    ("create", {"prompt": 5}, "prompt"),
    ("create", {"prompt": ""}, "prompt"),
    ("create", {"prompt": None}, "prompt"),
    ("create", {"context_id": 1}, "context_id"),
    ("create", {"context_id": ""}, "context_id"),
    ("create", {"agent_slug": ["default"]}, "agent_slug"),
    ("create", {"max_attempts": "3"}, "max_attempts"),
    ("create", {"max_attempts": 0}, "max_attempts"),
    ("create", {"max_attempts": 11}, "max_attempts"),
    ("create", {"max_attempts": 2.5}, "max_attempts"),
    ("create", {"max_attempts": True}, "max_attempts"),
    ("create", {"policy": {"timeout_sec": 0}}, "policy"),
    ("create", {"policy": {"timeout_sec": 3601}}, "policy"),
    ("create", {"policy": {"timeout_sec": "120"}}, "policy"),
    ("create", {"policy": {"budget": -1}}, "policy"),
    ("create", {"policy": {"budget": "5"}}, "policy"),
    ("create", {"policy": "fast"}, "policy"),
    ("create", {"context_hints": {"file": "a.md"}}, "context_hints"),
    ("create", {"context_hints": "a.md"}, "context_hints"),
    ("create", {"context_hints": [1]}, "context_hints"),
    ("create", {"desired_format": "xml"}, "desired_format"),
    ("create", {"priority": "1"}, "priority"),
    ("create", {"priority": 5000}, "priority"),
    ("create", {"idempotency_key": ""}, "idempotency_key"),
    ("create", {"idempotency_key": 5}, "idempotency_key"),
    # sizes: every string and list is bounded, and no string holds a NUL character
    ("create", {"prompt": "x" * 200_001}, "prompt"),
    ("create", {"prompt": "say \x00 hello"}, "prompt"),
    ("create", {"context_id": "c" * 201}, "context_id"),
    ("create", {"agent_slug": "a" * 201}, "agent_slug"),
    ("create", {"context_hints": ["h"] * 101}, "context_hints"),
    ("create", {"context_hints": ["h" * 1001]}, "context_hints"),
    ("create", {"context_hints": ["a\x00b"]}, "context_hints"),
    ("create", {"policy": {"budget": 1e13}}, "policy"),
    # lease
    ("lease", {"worker_id": 5}, "worker_id"),
    ("lease", {"worker_id": ""}, "worker_id"),
    ("lease", {"ttl_seconds": "300"}, "ttl_seconds"),
    ("lease", {"ttl_seconds": 0}, "ttl_seconds"),
    ("lease", {"ttl_seconds": -5}, "ttl_seconds"),
    ("lease", {"ttl_seconds": 1.5}, "ttl_seconds"),
    ("lease", {"ttl_seconds": 86_401}, "ttl_seconds"),
    # heartbeat
    ("heartbeat", {"lease_id": 5}, "lease_id"),
    ("heartbeat", {"lease_id": ""}, "lease_id"),
    ("heartbeat", {"worker_id": ["w1"]}, "worker_id"),
    # complete (seed completeTaskSchema, plus fencing and error codes)
    ("complete", {"status": "ok"}, "status"),
    ("complete", {"status": None}, "status"),
    ("complete", {"output": 5}, "output"),
    ("complete", {"error_message": 5}, "error_message"),
    ("complete", {"metrics": None}, "metrics"),
    ("complete", {"metrics": {}}, "metrics"),
    ("complete", {"metrics": {"duration_ms": -1}}, "metrics"),
    ("complete", {"metrics": {"duration_ms": "5"}}, "metrics"),
    ("complete", {"metrics": {"duration_ms": 1.5}}, "metrics"),
    ("complete", {"metrics": {"duration_ms": 5, "tokens_used": -1}}, "metrics"),
    ("complete", {"metrics": {"duration_ms": 5, "tokens_used": "10"}}, "metrics"),
    ("complete", {"artifact_type": ""}, "artifact_type"),
    ("complete", {"artifact_tags": "tag"}, "artifact_tags"),
    ("complete", {"error_code": "oops"}, "error_code"),
    ("complete", {"retry_at": "soon"}, "retry_at"),
    ("complete", {"lease_id": 5}, "lease_id"),
    ("complete", {"worker_id": ""}, "worker_id"),
    ("complete", {"output": "x" * (4 * 1024 * 1024 + 1)}, "output"),
    (
        "complete",
        {"status": "error", "error_message": "e" * (4 * 1024 * 1024 + 1)},
        "error_message",
    ),
    ("complete", {"output": "\x00"}, "output"),
    ("complete", {"artifact_tags": ["t"] * 65}, "artifact_tags"),
    ("complete", {"artifact_type": "t" * 129}, "artifact_type"),
    ("complete", {"session_id": "s" * 201}, "session_id"),
    ("complete", {"retry_at": 2**63}, "retry_at"),
    ("complete", {"metrics": {"duration_ms": 2**63}}, "metrics"),
    # register (seed registerWorkerSchema; names safe in URLs)
    ("register", {"name": 5}, "name"),
    ("register", {"name": ""}, "name"),
    ("register", {"name": "a/b"}, "name"),
    ("register", {"name": "x" * 129}, "name"),
    ("register", {"status": "busy"}, "status"),
    ("register", {"url": 5}, "url"),
    ("register", {"capabilities": {"max_concurrency": 0}}, "capabilities"),
    ("register", {"capabilities": {"max_concurrency": 33}}, "capabilities"),
    ("register", {"capabilities": {"max_concurrency": "2"}}, "capabilities"),
    ("register", {"capabilities": {"claude_cli": "yes"}}, "capabilities"),
    ("register", {"capabilities": {"labels": "prod"}}, "capabilities"),
    ("register", {"capabilities": "all"}, "capabilities"),
    ("register", {"ip_addrs": "10.0.0.1"}, "ip_addrs"),
    ("register", {"ip_addrs": [1]}, "ip_addrs"),
    ("register", {"ip_addrs": ["10.0.0.1"] * 65}, "ip_addrs"),
    ("register", {"capabilities": {"labels": ["l" * 129]}}, "capabilities"),
    ("register", {"capabilities": {"labels": ["l"] * 65}}, "capabilities"),
    ("register", {"os_info": "o" * 513}, "os_info"),
    # claim
    ("claim", {"wait_seconds": "1"}, "wait_seconds"),
    ("claim", {"wait_seconds": -1}, "wait_seconds"),
    ("claim", {"wait_seconds": 121}, "wait_seconds"),
    ("claim", {"ttl_seconds": 0}, "ttl_seconds"),
    # config (seed runtimeConfigSchema)
    ("config", {"membridge_server_url": "not a url"}, "membridge_server_url"),
    ("config", {"membridge_server_url": 5}, "membridge_server_url"),
    ("config", {"membridge_server_url": "ftp://membridge"}, "membridge_server_url"),
    ("config", {"admin_key": 12345678}, "admin_key"),
]


@pytest.mark.parametrize("route", list(ROUTES))
async def test_wrong_values_are_400_naming_the_field(
    client: httpx.AsyncClient, world: World, route: str
) -> None:
    """A wrong type or out-of-range value answers 400 with exactly that top-level field in
    fieldErrors (nested problems are grouped under their top-level field, as zod does)."""
    cases = [(changes, field) for r, changes, field in WRONG_VALUES if r == route]
    assert cases
    for changes, field in cases:
        response = await client.post(url(world, route), json=body(route, changes))
        try:
            assert_field_error(response, field)
        except AssertionError as failed:
            raise AssertionError(f"{route} {changes!r}: {response.text}") from failed


async def test_nested_messages_say_which_inner_field_is_wrong(
    client: httpx.AsyncClient, world: World
) -> None:
    """A nested error is reported under its top-level field, its message naming the inner one."""
    response = await client.post(
        url(world, "create"), json=body("create", {"policy": {"timeout_sec": 0}})
    )
    assert_field_error(response, "policy")
    assert response.json()["error"]["fieldErrors"]["policy"][0].startswith("timeout_sec")


@pytest.mark.parametrize(
    ("route", "sent", "missing"),
    [
        ("create", {}, ["context_id", "agent_slug", "prompt"]),
        ("create", {"context_id": "c", "agent_slug": "a"}, ["prompt"]),
        ("complete", {}, ["status", "metrics"]),
        ("complete", {"status": "success", "output": "x"}, ["metrics"]),
        ("register", {}, ["name"]),
        ("register", {"status": "online", "capabilities": {}}, ["name"]),
        ("config", {}, ["membridge_server_url", "admin_key"]),
    ],
)
async def test_missing_required_fields_are_named(
    client: httpx.AsyncClient,
    world: World,
    route: str,
    sent: dict[str, Any],
    missing: list[str],
) -> None:
    """Every missing required field appears in fieldErrors as ["Required"], and only those."""
    response = await client.post(url(world, route), json=sent)
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": {"formErrors": [], "fieldErrors": {name: ["Required"] for name in missing}}
    }


async def test_malformed_json_is_400_form_error(client: httpx.AsyncClient, world: World) -> None:
    """A body that is not JSON answers 400 with a form error (no field to blame), on every
    route that takes a body."""
    for route in ROUTES:
        for raw in (b"{nope", b'{"prompt": "unterminated', b"{'single': 1}"):
            response = await client.post(
                url(world, route), content=raw, headers={"content-type": "application/json"}
            )
            assert response.status_code == 400, (route, raw, response.text)
            assert response.json() == {"error": {"formErrors": [MALFORMED], "fieldErrors": {}}}


async def test_json_that_is_not_an_object_is_400_form_error(
    client: httpx.AsyncClient, world: World
) -> None:
    """A JSON array, string or number where an object belongs is a form error, on every route
    that takes a body."""
    for route in ROUTES:
        for sent in ([], ["a"], "text", 5):
            response = await client.post(url(world, route), json=sent)
            assert response.status_code == 400, (route, sent, response.text)
            expected = {"error": {"formErrors": [NOT_AN_OBJECT], "fieldErrors": {}}}
            assert response.json() == expected, (route, sent)


@pytest.mark.parametrize(
    ("sent", "rule"),
    [
        ({"status": "success", "metrics": {"duration_ms": 5}}, "output"),
        (
            {"status": "success", "output": None, "metrics": {"duration_ms": 5}},
            "output",
        ),
        (
            {"status": "error", "output": "partial", "metrics": {"duration_ms": 5}},
            "error_message",
        ),
        (
            {"status": "error", "error_message": None, "metrics": {"duration_ms": 5}},
            "error_message",
        ),
    ],
)
async def test_complete_envelope_rules(
    client: httpx.AsyncClient, world: World, sent: dict[str, Any], rule: str
) -> None:
    """Success needs an output and error needs an error_message (the seed's proxy spec): 400,
    reported against the missing field."""
    response = await client.post(url(world, "complete"), json=sent)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["formErrors"] == []
    assert error["fieldErrors"] == {rule: [f"Required when status is '{sent['status']}'"]}


async def test_body_is_validated_before_the_task_is_looked_up(client: httpx.AsyncClient) -> None:
    """An invalid body answers 400 even for an unknown task (validation comes first)."""
    response = await client.post(f"{API}/llm-tasks/no-such-task/complete", json={"status": "ok"})
    assert response.status_code == 400
    response = await client.post(f"{API}/llm-tasks/no-such-task/lease", json={"ttl_seconds": 0})
    assert_field_error(response, "ttl_seconds")


async def test_invalid_bodies_change_nothing(client: httpx.AsyncClient, world: World) -> None:
    """Refused requests leave tasks, leases, workers and the audit log exactly as they were."""
    snapshot_paths = ["/llm-tasks", "/leases", "/workers", "/audit", "/stats", "/config"]
    before = [(await client.get(f"{API}{path}")).json() for path in snapshot_paths]
    for route, changes, _ in WRONG_VALUES:
        if route == "claim":
            continue  # a valid-looking claim is a long poll; its refusals are covered above
        response = await client.post(url(world, route), json=body(route, changes))
        assert response.status_code == 400
    after = [(await client.get(f"{API}{path}")).json() for path in snapshot_paths]
    assert after == before


async def test_unknown_keys_are_refused_naming_them(
    client: httpx.AsyncClient, world: World
) -> None:
    """Unlike zod, which dropped them: an unknown key (a typo, the docs' `membridge_admin_key`)
    is a 400 naming it, as a form error at the top level and under its field when nested, and
    nothing changes."""
    before = (await client.get(f"{API}/llm-tasks")).json()
    created = await client.post(url(world, "create"), json=TASK | {"colour": "blue"})
    assert created.json() == {
        "error": {"formErrors": ["Unrecognized key: 'colour'"], "fieldErrors": {}}
    }
    nested = await client.post(url(world, "create"), json=TASK | {"policy": {"x": 1}})
    assert nested.json() == {
        "error": {"formErrors": [], "fieldErrors": {"policy": ["Unrecognized key: 'x'"]}}
    }
    registered = await client.post(
        url(world, "register"), json={"name": "w-extra", "capabilities": {"gpu": True}}
    )
    assert registered.json()["error"]["fieldErrors"] == {
        "capabilities": ["Unrecognized key: 'gpu'"]
    }
    # the seed's docs show `membridge_admin_key`, which the seed itself refused too
    configured = await client.post(
        url(world, "config"),
        json={"membridge_server_url": "http://m:8000", "membridge_admin_key": "k"},
    )
    assert configured.json() == {
        "error": {
            "formErrors": ["Unrecognized key: 'membridge_admin_key'"],
            "fieldErrors": {"admin_key": ["Required"]},
        }
    }
    for route, extra in [("heartbeat", {}), ("complete", COMPLETE), ("lease", {})]:
        response = await client.post(url(world, route), json=extra | {"colour": "blue"})
        assert response.status_code == 400, (route, response.text)
        assert response.json()["error"]["formErrors"] == ["Unrecognized key: 'colour'"]
    assert (await client.get(f"{API}/llm-tasks")).json() == before


async def test_every_documented_field_is_accepted(client: httpx.AsyncClient, world: World) -> None:
    """What the seed's clients send passes the strict models: the reference agent's and the
    install script's registration (agent metadata), the docs' `priority`, the agent's complete
    (`tokens_used: null`)."""
    registered = await client.post(
        url(world, "register"),
        json={
            "name": "node-1",
            "url": "http://10.0.0.5:8001",
            "status": "online",
            "capabilities": {"claude_cli": True, "max_concurrency": 2, "labels": ["systemd"]},
            "ip_addrs": ["10.0.0.5"],
            "agent_version": "0.4.0",
            "os_info": "Debian GNU/Linux 12",
            "install_method": "script",
        },
    )
    assert registered.status_code == 201, registered.text
    created = await client.post(url(world, "create"), json=TASK | {"priority": 5})
    assert created.status_code == 201, created.text
    beat = await client.post(url(world, "heartbeat"), json={})
    assert beat.status_code == 200, beat.text
    done = await client.post(
        url(world, "complete"),
        json={
            "status": "success",
            "output": "done",
            "error_message": None,
            "metrics": {"duration_ms": 5, "tokens_used": None},
        },
    )
    assert done.status_code == 200, done.text


async def test_optional_bodies_may_be_empty_or_absent(
    client: httpx.AsyncClient, world: World
) -> None:
    """Lease and heartbeat take no body at all, an empty one with a JSON content type (what the
    seed's agent sends), or {}."""
    lease = await client.post(url(world, "lease"))
    assert lease.status_code == 201, lease.text
    for raw in (b"", b"{}"):
        beat = await client.post(
            url(world, "heartbeat"), content=raw, headers={"content-type": "application/json"}
        )
        assert beat.status_code == 200, beat.text
    assert (await client.post(url(world, "heartbeat"))).status_code == 200
    await register_worker(client, "w2")
    other = await create_task(client)
    lease = await client.post(
        f"{API}/llm-tasks/{other['id']}/lease",
        content=b"",
        headers={"content-type": "application/json"},
    )
    assert lease.status_code == 201, lease.text


async def test_idempotency_key_header_and_body_must_agree(client: httpx.AsyncClient) -> None:
    """An Idempotency-Key header that contradicts the body's idempotency_key is a 400 on that
    field; agreeing ones are fine."""
    response = await client.post(
        f"{API}/llm-tasks",
        json=TASK | {"idempotency_key": "key-a"},
        headers={"Idempotency-Key": "key-b"},
    )
    assert_field_error(response, "idempotency_key")
    response = await client.post(
        f"{API}/llm-tasks",
        json=TASK | {"idempotency_key": "key-a"},
        headers={"Idempotency-Key": "key-a"},
    )
    assert response.status_code == 201


async def test_the_base_bodies_are_valid(client: httpx.AsyncClient, world: World) -> None:
    """The bodies the cases above start from are accepted as they are, so each 400 above is
    caused by the one change the case makes."""
    expected = {
        "create": {201},
        "lease": {201},
        "heartbeat": {200},
        "complete": {200},
        "register": {201},
        "claim": {200, 204},
        "config": {200},
    }
    assert set(expected) == set(ROUTES)
    for route, statuses in expected.items():
        response = await client.post(url(world, route), json=body(route, {}))
        assert response.status_code in statuses, (route, response.text)
