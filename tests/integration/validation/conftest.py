"""A runtime in-process with one of everything (task, worker, lease) for the routes to name."""

import httpx
import pytest

from tests.integration.validation.requests import World
from tests.support.api import API, create_task, register_worker


@pytest.fixture
async def world(client: httpx.AsyncClient) -> World:
    await register_worker(client, "w1", slots=2)
    leased = await create_task(client, context_id="ctx-leased")
    granted = await client.post(f"{API}/llm-tasks/{leased['id']}/lease")
    assert granted.status_code == 201, granted.text
    queued = await create_task(client, context_id="ctx-queued")
    return World(queued=queued, leased=leased, lease=granted.json()["lease"])
