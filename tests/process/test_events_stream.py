"""A task's live output on a real server: concurrent appends get consecutive seqs, followers see
new events at once and the stream ends with the task, and a caller follows only so many streams
at once."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bloom.runtime.storage.tables import task_events
from tests.support.api import API, success
from tests.support.db import DatabaseProbe
from tests.support.events import Sse, leased_task, parse_sse, post_events, texts
from tests.support.server import RuntimeProcess


async def read_sse(lines: AsyncIterator[str]) -> AsyncIterator[Sse]:
    """Events from a live stream, as each one completes."""
    block: list[str] = []
    async for line in lines:
        if line == "":
            if block:
                (item,) = parse_sse("\n".join(block) + "\n\n")
                yield item
            block = []
        else:
            block.append(line)


@pytest.fixture
async def server(runtime_process: RuntimeProcess) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=runtime_process.url, limits=limits, timeout=30) as http:
        yield http


async def test_concurrent_appends_get_gapless_consecutive_seqs(
    server: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """20 appends of 5 events at once to one task: seqs 1..100 without gaps or repeats, each
    append's events consecutive and in the order sent."""
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await asyncio.gather(*(server.get(f"{API}/health") for _ in range(20)))  # warm connections
    gate = asyncio.Event()

    async def append(n: int) -> httpx.Response:
        await gate.wait()
        return await post_events(server, task_id, lease_id, texts(5, f"b{n}-"))

    pending = [asyncio.create_task(append(n)) for n in range(20)]
    await asyncio.sleep(0)
    gate.set()
    responses = await asyncio.gather(*pending)
    assert [r.status_code for r in responses] == [200] * 20, [r.text for r in responses]
    last_seqs = sorted(r.json()["last_seq"] for r in responses)
    assert last_seqs == list(range(5, 101, 5))
    rows = probe.rows(
        task_events.select().where(task_events.c.task_id == task_id).order_by(task_events.c.seq)
    )
    assert [row["seq"] for row in rows] == list(range(1, 101))
    for n, response in enumerate(responses):
        last = response.json()["last_seq"]
        assert [row["data"] for row in rows[last - 5 : last]] == [f"b{n}-{i}" for i in range(5)]


async def test_following_delivers_new_events_at_once_and_ends_when_the_task_completes(
    server: httpx.AsyncClient, runtime_process: RuntimeProcess
) -> None:
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(server, task_id, lease_id, texts(2))
    url = f"{API}/llm-tasks/{task_id}/events"
    timeout = httpx.Timeout(10, read=None)
    async with server.stream("GET", url, headers={"Last-Event-ID": "1"}, timeout=timeout) as live:
        assert live.status_code == 200
        assert live.headers["content-type"].startswith("text/event-stream")
        assert live.headers["cache-control"] == "no-cache"
        events = read_sse(live.aiter_lines())
        resumed = await asyncio.wait_for(anext(events), 5)
        assert (resumed.id, resumed.event, resumed.data["data"]) == ("2", "text", "e1")

        for seq in (3, 4):
            started = time.monotonic()
            sent = await post_events(server, task_id, lease_id, [{"type": "live", "data": seq}])
            assert sent.json()["last_seq"] == seq
            arrived = await asyncio.wait_for(anext(events), 1)
            assert time.monotonic() - started < 1
            assert (arrived.id, arrived.event, arrived.data["data"]) == (str(seq), "live", seq)

        # A reader that hangs up mid-stream is let go cleanly.
        async with server.stream("GET", url, timeout=timeout) as dropped:
            first = await asyncio.wait_for(anext(read_sse(dropped.aiter_lines())), 5)
            assert first.id == "1"

        done = success(lease_id=lease_id, worker_id="w1")
        completed = await server.post(f"{API}/llm-tasks/{task_id}/complete", json=done)
        assert completed.status_code == 200
        end = await asyncio.wait_for(anext(events), 2)
        assert (end.event, end.data) == ("end", {"status": "completed"})
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(events), 2)  # the server closed the stream

    snapshot = await server.get(url, params={"follow": "false"})
    assert [e.id for e in parse_sse(snapshot.text)] == ["1", "2", "3", "4", None]
    assert (await server.get(f"{API}/health")).status_code == 200
    log = runtime_process.log()
    assert "Traceback" not in log
    assert "unhandled_error" not in log


async def test_follow_false_closes_on_a_live_task(server: httpx.AsyncClient) -> None:
    grant = await leased_task(server)
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    await post_events(server, task_id, lease_id, texts(2))
    response = await asyncio.wait_for(
        server.get(f"{API}/llm-tasks/{task_id}/events", params={"follow": "false"}), 5
    )
    events = parse_sse(response.text)
    assert [(e.id, e.event) for e in events] == [("1", "text"), ("2", "text"), (None, "end")]
    assert events[-1].data == {"status": "leased"}
    missing = await server.get(f"{API}/llm-tasks/nope/events")
    assert (missing.status_code, missing.json()) == (404, {"error": "Task not found"})


STREAMS = 3
ADMIN_KEY = "stream-cap-admin-key-0123456789"


def make_key(database_url: str, data_dir: Path, role: str) -> str:
    """A key of `role` made with `bloom key create`, as an operator would."""
    env = {**os.environ, "DATABASE_URL": database_url, "BLOOM_DATA_DIR": str(data_dir)}
    made = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "key", "create", "--role", role],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return made.stdout.strip()


async def test_a_caller_follows_at_most_its_streams_and_a_closed_one_frees_its_slot(
    database_url: str, tmp_path: Path
) -> None:
    """With BLOOM_EVENT_STREAMS_PER_CALLER=3, a viewer's fourth stream is refused with 429 and
    Retry-After while another caller's is served; a stream the viewer closes, or that ends with
    its task, gives its slot back."""
    runtime = RuntimeProcess(
        database_url,
        tmp_path,
        RUNTIME_API_KEY=ADMIN_KEY,
        BLOOM_EVENT_STREAMS_PER_CALLER=str(STREAMS),
    )
    runtime.start()
    try:
        viewer = make_key(database_url, tmp_path, "viewer")
        timeout = httpx.Timeout(10, read=None)
        async with (
            httpx.AsyncClient(
                base_url=runtime.url, headers={"X-Runtime-API-Key": ADMIN_KEY}, timeout=timeout
            ) as admin,
            httpx.AsyncClient(
                base_url=runtime.url, headers={"X-Runtime-API-Key": viewer}, timeout=timeout
            ) as reader,
        ):
            grant = await leased_task(admin)
            task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
            await post_events(admin, task_id, lease_id, texts(1))
            url = f"{API}/llm-tasks/{task_id}/events"

            async with contextlib.AsyncExitStack() as held:
                streams = [
                    await held.enter_async_context(reader.stream("GET", url))
                    for _ in range(STREAMS)
                ]
                assert [live.status_code for live in streams] == [200] * STREAMS
                # Each stream's reader is kept: a reader dropped would hang its stream up.
                readers = [read_sse(live.aiter_lines()) for live in streams]
                for reader_of in readers:
                    assert (await asyncio.wait_for(anext(reader_of), 5)).id == "1"
                refused = await reader.get(url)
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "5"
                assert refused.json()["error"].startswith("Too many event streams open")
                async with admin.stream("GET", url) as other:  # another caller: its own slots
                    assert other.status_code == 200

                await streams[0].aclose()  # the viewer hangs up: its slot comes back
                deadline = time.monotonic() + 5
                while (await reader.get(url, params={"follow": "false"})).status_code == 429:
                    assert time.monotonic() < deadline, "the closed stream kept its slot"
                    await asyncio.sleep(0.05)
                replaced = await held.enter_async_context(reader.stream("GET", url))
                assert replaced.status_code == 200
                assert (await reader.get(url)).status_code == 429

                done = success(lease_id=lease_id, worker_id="w1")
                completed = await admin.post(f"{API}/llm-tasks/{task_id}/complete", json=done)
                assert completed.status_code == 200
                for reader_of in [*readers[1:], read_sse(replaced.aiter_lines())]:
                    items = [item async for item in reader_of]  # each ends with the task
                    assert items[-1].event == "end"

                other_task = await leased_task(admin)  # the ended streams' slots are free
                other_url = f"{API}/llm-tasks/{other_task['task']['id']}/events"
                again = [
                    await held.enter_async_context(reader.stream("GET", other_url))
                    for _ in range(STREAMS)
                ]
                assert [live.status_code for live in again] == [200] * STREAMS
    finally:
        runtime.stop()
    assert "Traceback" not in runtime.log()
