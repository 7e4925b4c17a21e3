"""A waiting claim whose client hangs up is over at once on a real server (both databases): the
next task goes to a claim still waiting, never to the closed connection."""

import asyncio

import httpx

from tests.support.api import API, create_task, register_worker
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess

WAIT = {"wait_seconds": 30}


async def test_a_claim_whose_client_hung_up_gets_no_task(
    runtime_process: RuntimeProcess, probe: DatabaseProbe
) -> None:
    async with (
        httpx.AsyncClient(base_url=runtime_process.url, timeout=60) as staying_http,
        httpx.AsyncClient(base_url=runtime_process.url, timeout=60) as leaving_http,
    ):
        await register_worker(staying_http, "staying")
        await register_worker(staying_http, "leaving")
        staying = asyncio.create_task(staying_http.post(f"{API}/workers/staying/claim", json=WAIT))
        await asyncio.sleep(0.3)
        # the newest waiting claim: the one a new task's wake reaches first
        leaving = asyncio.create_task(leaving_http.post(f"{API}/workers/leaving/claim", json=WAIT))
        await asyncio.sleep(0.3)
        leaving.cancel()  # hang up
        await asyncio.gather(leaving, return_exceptions=True)
        await leaving_http.aclose()
        await asyncio.sleep(0.3)
        task = await create_task(staying_http)
        granted = await asyncio.wait_for(staying, 10)
    assert granted.status_code == 200, granted.text
    assert granted.json()["task"]["id"] == task["id"]
    assert [lease["worker_id"] for lease in probe.leases_of(task["id"])] == ["staying"]
