"""The real `bloom membridge serve`: the seed's verification requests on a fresh server, state
that survives kill -9, dev mode, and the command's refusals (exit 2, one clear line)."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.ids import canonical_id
from tests.support.databases import fresh_postgres_url
from tests.support.membridge import MembridgeProcess, membridge_env, run_membridge_cli

DOCUMENTED_HEALTH = {
    "status": "ok",
    "service": "membridge-control-plane",
    "version": "0.3.0",
    "projects": 0,
    "agents": 0,
}
DOCUMENTED_AGENT = {
    "name": "worker-01",
    "status": "online",
    "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """SQLite: None, the default `membridge.db` under the data dir. PostgreSQL: a database that
    holds the runtime's schema and not yet Membridge's (serve migrates it in)."""
    if request.param == "sqlite":
        return None
    return fresh_postgres_url(request.getfixturevalue("postgres"))


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def snapshot(http: httpx.Client, cids: list[str]) -> dict[str, Any]:
    """Everything the API shows about the state."""
    return {
        "agents": ok(http.get("/agents")),
        "projects": ok(http.get("/projects")),
        "nodes": {cid: ok(http.get(f"/projects/{cid}/nodes")) for cid in cids},
        "leadership": {cid: ok(http.get(f"/projects/{cid}/leadership")) for cid in cids},
        "jobs": ok(http.get("/jobs")),
    }


def test_a_fresh_server_then_kill_9_and_everything_is_still_there(
    database_url: str | None, tmp_path: Path
) -> None:
    first = MembridgeProcess(tmp_path, database_url)
    first.start()
    try:
        # The seed's verification requests, on a fresh server.
        health = ok(httpx.get(f"{first.url}/health"))
        assert set(health) - set(DOCUMENTED_HEALTH) == {"bloom_version"}
        assert {key: health[key] for key in DOCUMENTED_HEALTH} == DOCUMENTED_HEALTH
        with first.client() as http:
            registered = ok(http.post("/agents", json=DOCUMENTED_AGENT), 201)
            assert {k: registered[k] for k in DOCUMENTED_AGENT} == DOCUMENTED_AGENT
            assert ok(http.get("/agents")) == [registered]

            # Build up every kind of state.
            ok(http.post("/agents", json={"name": "node-b", "url": "http://10.0.0.2:8001"}), 201)
            ok(http.post("/projects", json={"name": "garden"}), 201)
            ok(http.post("/projects", json={"name": "orchard"}), 201)
            garden, wild = canonical_id("garden"), canonical_id("wild")
            for node, cid, project in [
                ("worker-01", garden, "garden"),
                ("node-b", garden, "garden"),
                ("worker-01", wild, "wild"),
            ]:
                body = {"node_id": node, "canonical_id": cid, "project_id": project}
                ok(http.post("/agent/heartbeat", json=body | {"obs_count": 3, "ip_addrs": ["::1"]}))
            select = f"/projects/{garden}/leadership/select"
            ok(http.post(select, json={"primary_node_id": "node-b"}))
            chosen = ok(http.post(select, json={"primary_node_id": "worker-01"}))
            assert chosen["epoch"] == 2
            before = snapshot(http, [garden, wild])
            assert ok(httpx.get(f"{first.url}/health"))["agents"] == 2
    finally:
        first.kill()  # SIGKILL: no shutdown, no flush beyond what was committed

    second = MembridgeProcess(tmp_path, database_url)
    second.start()
    try:
        with second.client() as http:
            after = snapshot(http, [garden, wild])
            assert after == before
            assert [a["name"] for a in after["agents"]] == ["worker-01", "node-b"]
            assert after["agents"][0]["status"] == "online"
            assert [(p["name"], p["source"], p["nodes_count"]) for p in after["projects"]] == [
                ("garden", "manual", 2),
                ("orchard", "manual", 0),
                ("wild", "heartbeat", 1),
            ]
            leadership = after["leadership"][garden]
            assert (leadership["preferred_primary"], leadership["epoch"]) == ("worker-01", 2)
            assert leadership["expires_at"] == chosen["expires_at"]
            assert {n["node_id"]: n["role"] for n in leadership["nodes"]} == {
                "worker-01": "primary",
                "node-b": "secondary",
            }
            # the epoch goes on counting after the restart
            third = ok(http.post(select, json={"primary_node_id": "node-b", "lease_seconds": 60}))
            assert third["epoch"] == 3
            beat = {"node_id": "node-b", "canonical_id": garden}
            assert ok(http.post("/agent/heartbeat", json=beat))["role"] == "primary"
        health = ok(httpx.get(f"{second.url}/health"))
        assert (health["projects"], health["agents"]) == (2, 2)
    finally:
        second.stop()


def test_dev_mode_without_a_key_serves_everything_open_and_says_so(tmp_path: Path) -> None:
    server = MembridgeProcess(tmp_path, admin_key=None, MEMBRIDGE_DEV="1")
    server.start()
    try:
        health = ok(httpx.get(f"{server.url}/health"))
        assert health["auth"] == "disabled"
        assert ok(httpx.get(f"{server.url}/projects")) == []
        ok(httpx.post(f"{server.url}/projects", json={"name": "open"}), 201)
        wrong = httpx.get(f"{server.url}/agents", headers={"X-MEMBRIDGE-ADMIN": "anything"})
        assert wrong.status_code == 200
    finally:
        server.stop()
    warnings = [line for line in server.log().splitlines() if "membridge_auth_disabled" in line]
    assert len(warnings) == 1
    assert '"level": "warning"' in warnings[0]
    assert "EVERY endpoint is open" in warnings[0]


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


def test_serve_refuses_clearly_without_a_key_or_with_bad_settings(tmp_path: Path) -> None:
    """Each refusal is exit status 2 and one line naming the setting; all run at once. (The
    other bad values are refused by the same code: see test_membridge_rules.)"""
    cases: list[tuple[dict[str, str], list[str]]] = [
        ({}, ["no admin key", "MEMBRIDGE_ADMIN_KEY", "MEMBRIDGE_DEV=1"]),
        (
            {"MEMBRIDGE_ADMIN_KEY": "k", "BLOOM_MEMBRIDGE_PORT": "eighty"},
            ["BLOOM_MEMBRIDGE_PORT: Input should be a valid integer"],
        ),
        (
            {
                "MEMBRIDGE_ADMIN_KEY": "k",
                "BLOOM_MEMBRIDGE_DATABASE_URL": "mysql://root:hunter2@localhost/mb",
            },
            ["BLOOM_MEMBRIDGE_DATABASE_URL", "Unsupported database URL scheme 'mysql'"],
        ),
    ]
    started = [
        subprocess.Popen(
            [*_serve_command()],
            env=membridge_env(tmp_path / f"case-{index}", **env),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index, (env, _) in enumerate(cases)
    ]
    for process, (env, expected) in zip(started, cases, strict=True):
        out, err = process.communicate(timeout=60)
        line = refusal(subprocess.CompletedProcess(process.args, process.returncode, out, err))
        for fragment in expected:
            assert fragment in line, (env, line)
        assert "hunter2" not in out + err
    assert not (tmp_path / "case-0" / "membridge.db").exists()  # refused before touching storage


def _serve_command() -> list[str]:
    return [sys.executable, "-m", "bloom.cli.main", "membridge", "serve", "--port", "1"]


def test_db_upgrade_and_current(tmp_path: Path) -> None:
    upgraded = run_membridge_cli("db", "upgrade", data_dir=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    path = (tmp_path / "membridge.db").resolve()
    assert f"Migrating sqlite:///{path} to head" in upgraded.stdout
    assert "At revision m0001." in upgraded.stdout
    current = run_membridge_cli("db", "current", data_dir=tmp_path)
    assert current.returncode == 0, current.stderr
    assert current.stdout.splitlines() == ["database: m0001", "head:     m0001"]
