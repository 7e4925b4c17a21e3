"""List filters, limits and path ids: checked, refused in the same 400 shape (404 for ids)."""

import httpx
import pytest
from sqlalchemy import insert

from bloom.domain.ids import new_id
from bloom.runtime.storage.tables import audit_logs
from tests.integration.validation.requests import World, assert_field_error
from tests.support.api import API
from tests.support.clock import FakeClock


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/llm-tasks?status=bogus", "status"),
        ("/llm-tasks?status=QUEUED", "status"),
        ("/llm-tasks?limit=0", "limit"),
        ("/llm-tasks?limit=-1", "limit"),
        ("/llm-tasks?limit=ten", "limit"),
        ("/llm-tasks?offset=-1", "offset"),
        ("/llm-tasks?offset=1000000001", "offset"),
        ("/artifacts?task_id=a%00b", "task_id"),
        ("/audit?task_id=%00", "task_id"),
        ("/leases?status=bogus", "status"),
        ("/leases?limit=0", "limit"),
        ("/artifacts?limit=0", "limit"),
        ("/audit?limit=-1", "limit"),
        ("/audit?limit=ten", "limit"),
    ],
)
async def test_bad_list_filters_are_400_naming_the_parameter(
    client: httpx.AsyncClient, path: str, field: str
) -> None:
    """An unknown status or a bad limit/offset is refused (the seed silently returned [] for
    an unknown status, and 500 for a negative audit limit)."""
    assert_field_error(await client.get(f"{API}{path}"), field)


@pytest.mark.parametrize(
    "status", ["queued", "leased", "running", "completed", "failed", "dead", "cancelled"]
)
async def test_every_task_status_is_a_valid_filter(client: httpx.AsyncClient, status: str) -> None:
    """Each task status filters (an empty list on a fresh database)."""
    response = await client.get(f"{API}/llm-tasks", params={"status": status})
    assert response.status_code == 200
    assert response.json() == []


async def test_status_filter_selects_exactly_that_status(
    client: httpx.AsyncClient, world: World
) -> None:
    """?status= returns only tasks (and leases) in that status."""
    queued = (await client.get(f"{API}/llm-tasks", params={"status": "queued"})).json()
    assert [t["id"] for t in queued] == [world.queued["id"]]
    leased = (await client.get(f"{API}/llm-tasks", params={"status": "leased"})).json()
    assert [t["id"] for t in leased] == [world.leased["id"]]
    active = (await client.get(f"{API}/leases", params={"status": "active"})).json()
    assert [lease["id"] for lease in active] == [world.lease["id"]]
    assert (await client.get(f"{API}/leases", params={"status": "expired"})).json() == []


async def add_audit_entries(client: httpx.AsyncClient, count: int, clock: FakeClock) -> None:
    container = client.app.state.container  # type: ignore[attr-defined]
    rows = [
        {
            "id": new_id(clock.now + i),
            "timestamp": clock.now + i,
            "action": "test_entry",
            "entity_type": "test",
            "entity_id": str(i),
            "actor": "test",
            "detail": f"entry {i}",
        }
        for i in range(count)
    ]
    async with container.db.write() as tx:
        for row in rows:
            await tx.connection.execute(insert(audit_logs), row)


async def test_audit_limit_defaults_to_100_and_is_capped_at_1000(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    """?limit=0 or none: 100 entries (the seed's default); ?limit=5000: at most 1000 (the seed
    had no cap); a small limit returns the newest entries first."""
    await add_audit_entries(client, 1_005, clock)

    async def count(query: str) -> int:
        response = await client.get(f"{API}/audit{query}")
        assert response.status_code == 200, response.text
        return len(response.json())

    assert await count("") == 100
    assert await count("?limit=0") == 100
    assert await count("?limit=5000") == 1000
    assert await count("?limit=1000") == 1000
    assert await count("?limit=250") == 250
    newest = (await client.get(f"{API}/audit", params={"limit": 5})).json()
    assert [entry["entity_id"] for entry in newest] == ["1004", "1003", "1002", "1001", "1000"]


async def test_list_limits_are_capped(client: httpx.AsyncClient, world: World) -> None:
    """Huge limits are accepted and simply capped; limit and offset page through tasks."""
    many = await client.get(f"{API}/llm-tasks", params={"limit": 10**9})
    assert many.status_code == 200
    assert len(many.json()) == 2
    first = (await client.get(f"{API}/llm-tasks", params={"limit": 1})).json()
    second = (await client.get(f"{API}/llm-tasks", params={"limit": 1, "offset": 1})).json()
    assert [t["id"] for t in first + second] == [world.queued["id"], world.leased["id"]]
    assert (await client.get(f"{API}/leases", params={"limit": 10**9})).status_code == 200
    assert (await client.get(f"{API}/artifacts", params={"limit": 10**9})).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/llm-tasks/a%00b"),
        ("POST", "/llm-tasks/%00/cancel"),
        ("GET", "/workers/w%0A1"),
        ("DELETE", "/workers/%7F"),
        ("GET", "/artifacts/%00/content"),
        ("GET", "/llm-tasks/" + "x" * 5000),
    ],
)
async def test_malformed_ids_are_404_json(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    """An id with a control character (which no database stores) or of any length names
    nothing: 404 JSON, never a 500."""
    response = await client.request(method, f"{API}{path}")
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/json"
    assert "error" in response.json()
