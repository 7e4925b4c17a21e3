"""`bloom artifacts migrate --to s3` as a service: content of the row and of files moved into the
bucket, checked against its SHA-256, rows pointed there only after the copy, resumable after an
outage, and a row whose content does not match left where it was."""

from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from bloom.domain.errors import Invalid, Unavailable
from bloom.runtime.app import create_app
from bloom.runtime.container import build_container
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.tables import runtime_artifacts as art
from tests.support.api import API, create_task, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe
from tests.support.s3 import Bucket, TcpProxy

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


async def complete_tasks(settings: RuntimeSettings, outputs: list[str]) -> list[str]:
    """Artifact ids of tasks completed with `outputs`, under `settings`' store."""
    app = create_app(settings, clock=FakeClock())
    ids = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            await register_worker(http, "w1", slots=len(outputs))
            for output in outputs:
                task = await create_task(http)
                await http.post(f"{API}/llm-tasks/{task['id']}/lease")
                done = await http.post(
                    f"{API}/llm-tasks/{task['id']}/complete", json=success(output)
                )
                ids.append(done.json()["artifact"]["id"])
    return ids


async def contents(settings: RuntimeSettings, ids: list[str]) -> list[bytes]:
    app = create_app(settings, clock=FakeClock())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            return [(await http.get(f"{API}/artifacts/{i}/content")).content for i in ids]


@pytest.fixture
def moved_settings(database_url: str, tmp_path: Path, s3_bucket: Bucket) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, artifact_store="s3", **s3_bucket.settings())


async def test_db_and_fs_content_moves_into_the_bucket_once(
    database_url: str, tmp_path: Path, moved_settings: RuntimeSettings, probe: DatabaseProbe
) -> None:
    in_rows = await complete_tasks(make_settings(database_url, tmp_path), ["one", "two", ""])
    in_files = await complete_tasks(
        make_settings(database_url, tmp_path, artifact_store="fs"), ["three", "one"]
    )
    container = build_container(moved_settings)
    seen: list[str] = []
    try:
        report = await container.artifact_moves.move_all(
            "s3", lambda a, outcome: seen.append(outcome)
        )
        again = await container.artifact_moves.move_all("s3")
    finally:
        await container.close()
    assert (report.moved, report.problems, seen) == (5, 0, ["moved"] * 5)
    assert report.moved_bytes == len("onetwothreeone")
    assert again.moved == 0
    rows = probe.rows(select(art.c.storage, art.c.content, art.c.url))
    assert {(row["storage"], row["content"]) for row in rows} == {("s3", None)}
    assert all(row["url"].startswith(f"s3://{moved_settings.s3_bucket}/") for row in rows)
    got = await contents(moved_settings, in_rows + in_files)
    assert got == [b"one", b"two", b"", b"three", b"one"]


async def test_an_outage_stops_the_move_and_a_rerun_resumes(
    database_url: str, tmp_path: Path, s3_bucket: Bucket, s3_proxy: TcpProxy, probe: DatabaseProbe
) -> None:
    ids = await complete_tasks(make_settings(database_url, tmp_path), ["a", "b"])
    behind = Bucket(s3_proxy.url, s3_bucket.name).settings() | {"s3_timeout_sec": 1.0}
    settings = make_settings(database_url, tmp_path, artifact_store="s3", **behind)
    container = build_container(settings)
    try:
        s3_proxy.cut()
        with pytest.raises(Unavailable, match="0 moved so far: run again to resume"):
            await container.artifact_moves.move_all("s3")
        assert {row["storage"] for row in probe.rows(select(art.c.storage))} == {"db"}
        s3_proxy.restore()
        assert (await container.artifact_moves.move_all("s3")).moved == 2
    finally:
        await container.close()
    assert await contents(settings, ids) == [b"a", b"b"]


async def test_content_that_does_not_match_its_digest_stays_where_it_is(
    database_url: str, tmp_path: Path, moved_settings: RuntimeSettings, probe: DatabaseProbe
) -> None:
    [good, bad] = await complete_tasks(make_settings(database_url, tmp_path), ["good", "bad"])
    with probe.engine.begin() as conn:
        conn.execute(update(art).where(art.c.id == bad).values(content="tampered"))
    container = build_container(moved_settings)
    try:
        report = await container.artifact_moves.move_all("s3")
        with pytest.raises(Invalid):
            await container.artifact_moves.move_all("db")
    finally:
        await container.close()
    assert (report.moved, report.mismatched) == (1, 1)
    storage = {row["id"]: row["storage"] for row in probe.rows(select(art.c.id, art.c.storage))}
    assert storage == {good: "s3", bad: "db"}
