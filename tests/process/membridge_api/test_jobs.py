"""Membridge over HTTP: the jobs log."""

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, insert
from sqlalchemy.pool import NullPool

from bloom.db.database import resolve_database
from bloom.domain.ids import canonical_id
from bloom.membridge.storage.tables import jobs
from tests.process.membridge_api.calls import ok, unique
from tests.support.membridge import (
    MembridgeProcess,
)


def insert_jobs(server: MembridgeProcess, rows: list[dict[str, Any]]) -> None:
    """Write jobs behind the server's back (nothing in the API creates them yet)."""
    target = resolve_database(server.resolved_database_url, Path())
    engine = create_engine(target.sync_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(insert(jobs), rows)
    finally:
        engine.dispose()


def test_jobs_list_and_404(server: MembridgeProcess, http: httpx.Client) -> None:
    assert isinstance(ok(http.get("/jobs")), list)
    missing = http.get("/jobs/nonexistent")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Job 'nonexistent' not found"})
    project = unique("proj")
    base = {
        "action": "pull",
        "project": project,
        "agent": "worker-01",
        "canonical_id": canonical_id(project),
        "status": "completed",
        "detail": None,
        "stdout": None,
        "stderr": None,
        "returncode": None,
        "dryrun": False,
        "finished_at": None,
        "request_id": None,
    }
    ids = [unique("job") for _ in range(3)]
    insert_jobs(
        server,
        [
            base | {"id": ids[0], "created_at": 4_000_000_000_000},
            base | {"id": ids[1], "created_at": 4_000_000_001_000, "dryrun": True},
            base
            | {
                "id": ids[2],
                "created_at": 4_000_000_002_500,
                "finished_at": 4_000_000_003_000,
                "returncode": 1,
                "stderr": "boom",
                "status": "failed",
                "request_id": "req-1",
            },
        ],
    )
    newest = ok(http.get("/jobs", params={"project": project}))
    assert [j["id"] for j in newest] == [ids[2], ids[1], ids[0]]
    assert newest[0] == base | {
        "id": ids[2],
        "status": "failed",
        "detail": None,
        "stdout": None,
        "stderr": "boom",
        "returncode": 1,
        "dryrun": False,
        "created_at": 4_000_000_002.5,
        "finished_at": 4_000_000_003.0,
        "request_id": "req-1",
    }
    assert newest[1]["dryrun"] is True
    assert [j["id"] for j in ok(http.get("/jobs", params={"limit": 2}))] == [ids[2], ids[1]]
    assert ok(http.get(f"/jobs/{ids[1]}")) == newest[1]
    assert ok(http.get("/jobs", params={"project": unique("nobody")})) == []


@pytest.mark.parametrize("limit", ["0", "-1", "201", "ten"])
def test_jobs_limit_out_of_range_is_422(http: httpx.Client, limit: str) -> None:
    response = http.get("/jobs", params={"limit": limit})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]


def test_jobs_limit_bounds_are_accepted(http: httpx.Client) -> None:
    for limit in ("1", "200"):
        assert http.get("/jobs", params={"limit": limit}).status_code == 200
