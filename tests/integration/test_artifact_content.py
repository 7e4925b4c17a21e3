"""`GET /api/runtime/artifacts/{id}/content` for every store (the row, files, an S3 bucket):
streamed byte-exact with Content-Type, Content-Length, ETag and Range; and a complete while the S3
store is down answers 503 with Retry-After, completes nothing, and blocks no other task."""

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.app import create_app
from tests.support.api import API, create_task, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.s3 import Bucket, TcpProxy

TEXT = "héllo\n" + "".join(chr(0x41 + i % 26) for i in range(200_000))  # multi-byte, ~200 kB


@pytest.fixture(params=["db", "fs", pytest.param("s3", marks=pytest.mark.s3)])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def app_client(settings: Any, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            yield http


@pytest.fixture
async def http(
    store_kind: str, request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    extra: dict[str, object] = {"artifact_store": store_kind}
    if store_kind == "s3":
        extra |= request.getfixturevalue("s3_bucket").settings()
    async for client in app_client(make_settings(database_url, tmp_path, **extra), FakeClock()):
        yield client


async def complete_one(http: httpx.AsyncClient, output: str, **task: Any) -> dict[str, Any]:
    created = await create_task(http, **task)
    await register_worker(http, f"w-{created['id'][:8]}")
    await http.post(f"{API}/llm-tasks/{created['id']}/lease")
    done = await http.post(f"{API}/llm-tasks/{created['id']}/complete", json=success(output))
    assert done.status_code == 200, done.text
    return dict(done.json()["artifact"])


async def test_content_is_streamed_whole_and_in_ranges(
    http: httpx.AsyncClient, store_kind: str
) -> None:
    artifact = await complete_one(http, TEXT)
    data = TEXT.encode()
    sha = hashlib.sha256(data).hexdigest()
    assert (artifact["storage"], artifact["sha256"], artifact["size_bytes"]) == (
        store_kind,
        sha,
        len(data),
    )
    if store_kind == "s3":
        assert artifact["content"] is None
        assert (
            artifact["url"]
            == f"s3://{artifact['url'].split('/')[2]}/artifacts/sha256/{sha[:2]}/{sha}"
        )
    url = f"{API}/artifacts/{artifact['id']}/content"

    whole = await http.get(url)
    assert whole.status_code == 200
    assert whole.content == data
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert whole.headers["content-length"] == str(len(data))
    assert whole.headers["etag"] == f'"{sha}"'
    assert whole.headers["accept-ranges"] == "bytes"

    part = await http.get(url, headers={"Range": "bytes=1-6"})
    assert (part.status_code, part.content) == (206, data[1:7])
    assert part.headers["content-range"] == f"bytes 1-6/{len(data)}"
    assert part.headers["content-length"] == "6"
    tail = await http.get(url, headers={"Range": "bytes=-100"})
    assert (tail.status_code, tail.content) == (206, data[-100:])
    open_ended = await http.get(url, headers={"Range": f"bytes={len(data) - 3}-"})
    assert (open_ended.status_code, open_ended.content) == (206, data[-3:])
    beyond = await http.get(url, headers={"Range": f"bytes={len(data)}-"})
    assert beyond.status_code == 416
    assert beyond.headers["content-range"] == f"bytes */{len(data)}"
    several = await http.get(url, headers={"Range": "bytes=0-1,5-6"})  # not served: all of it
    assert (several.status_code, several.content) == (200, data)

    cached = await http.get(url, headers={"If-None-Match": f'"{sha}"'})
    assert (cached.status_code, cached.content) == (304, b"")
    head = await http.head(url)
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == str(len(data))


async def test_json_artifacts_are_typed_and_unknown_ones_are_404(http: httpx.AsyncClient) -> None:
    artifact = await complete_one(http, '{"a": 1}', desired_format="json")
    got = await http.get(f"{API}/artifacts/{artifact['id']}/content")
    assert (got.status_code, got.headers["content-type"]) == (200, "application/json")
    assert (await http.get(f"{API}/artifacts/nope/content")).status_code == 404


async def test_empty_content(http: httpx.AsyncClient) -> None:
    artifact = await complete_one(http, "")
    got = await http.get(f"{API}/artifacts/{artifact['id']}/content")
    assert (got.status_code, got.content, got.headers["content-length"]) == (200, b"", "0")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_an_s3_outage_refuses_completes_and_blocks_nothing_else(
    s3_bucket: Bucket, s3_proxy: TcpProxy, database_url: str, tmp_path: Path
) -> None:
    behind_proxy = Bucket(s3_proxy.url, s3_bucket.name).settings() | {"s3_timeout_sec": 1.0}
    settings = make_settings(database_url, tmp_path, artifact_store="s3", **behind_proxy)
    async for http in app_client(settings, FakeClock()):
        first, second = await create_task(http), await create_task(http, context_id="ctx-2")
        await register_worker(http, "w1", slots=2)
        for task in (first, second):
            assert (await http.post(f"{API}/llm-tasks/{task['id']}/lease")).status_code == 201

        s3_proxy.cut()
        refused = await http.post(f"{API}/llm-tasks/{first['id']}/complete", json=success("x"))
        assert refused.status_code == 503, refused.text
        assert refused.json() == {"error": "Artifact store unavailable; retry the complete later"}
        assert int(refused.headers["retry-after"]) > 0
        still = (await http.get(f"{API}/llm-tasks/{first['id']}")).json()
        assert still["status"] == "leased"
        assert (await http.get(f"{API}/artifacts")).json() == []
        # Other work goes on: a heartbeat, a new task and a complete without output.
        beat = await http.post(f"{API}/llm-tasks/{second['id']}/heartbeat")
        assert beat.status_code == 200
        assert (await create_task(http, context_id="ctx-3"))["status"] == "queued"

        s3_proxy.restore()
        done = await http.post(f"{API}/llm-tasks/{first['id']}/complete", json=success("x"))
        assert done.status_code == 200, done.text
        content = await http.get(f"{API}/artifacts/{done.json()['artifact']['id']}/content")
        assert content.content == b"x"

        s3_proxy.cut()
        unreadable = await http.get(f"{API}/artifacts/{done.json()['artifact']['id']}/content")
        assert unreadable.status_code == 503
        assert unreadable.headers["retry-after"]
