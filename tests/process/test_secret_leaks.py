"""No configured secret leaks, end to end, with real processes: a protected runtime, Membridge
with its admin key, the Membridge config POSTed with that key, workers with keys of their own
running the real Claude CLI against the echo model (with a fake Anthropic key). After a few
tasks, every process's log file, every row of every runtime table (the audit first of all), and
the answer of every GET of the runtime's API are searched for each secret, and none is found.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bloom.runtime.storage.tables import metadata
from tests.support.db import DatabaseProbe
from tests.support.stack import Stack

RUNTIME_API_KEY = "rt-admin-key-7f3a9c1e5b2d4f60"
SECRET_KEY = "server-secret-key-4b8e2a6c0d1f3e57"
ANTHROPIC_KEY = "sk-ant-fake-0a1b2c3d4e5f6a7b8c9d"


def gets(http: httpx.Client, stack: Stack) -> dict[str, str]:
    """Every GET of the runtime's API (and its Membridge proxy), for what this run made."""
    paths = [
        "/api/runtime/health",
        "/api/runtime/config",
        "/api/runtime/session",
        "/api/runtime/workers",
        "/api/runtime/llm-tasks",
        "/api/runtime/runs",
        "/api/runtime/leases",
        "/api/runtime/artifacts",
        "/api/runtime/audit?limit=1000",
        "/api/runtime/stats",
        "/api/membridge/health",
        "/api/membridge/agents",
        "/api/membridge/projects",
        "/api/membridge/jobs",
        "/api/openapi.json",
        "/api/docs",
        "/",
    ]
    for worker in http.get("/api/runtime/workers").json():
        paths.append(f"/api/runtime/workers/{worker['id']}")
    for task in http.get("/api/runtime/llm-tasks").json():
        paths.append(f"/api/runtime/llm-tasks/{task['id']}")
        paths.append(f"/api/runtime/llm-tasks/{task['id']}/events?follow=false")
    for artifact in http.get("/api/runtime/artifacts").json():
        paths.append(f"/api/runtime/artifacts/{artifact['id']}")
        paths.append(f"/api/runtime/artifacts/{artifact['id']}/content")
    answers = {}
    for path in paths:
        response = http.get(path)
        assert response.status_code == 200, (path, response.text)
        answers[path] = response.text
    answers["POST /api/runtime/test-connection"] = http.post("/api/runtime/test-connection").text
    return answers


def every_row(probe: DatabaseProbe) -> list[dict[str, Any]]:
    return [row for table in metadata.sorted_tables for row in probe.rows(select(table))]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_no_secret_in_any_log_row_or_answer(
    database_url: str, tmp_path: Path, claude: Path, probe: DatabaseProbe
) -> None:
    stack = Stack(database_url, tmp_path, claude, admin_key=RUNTIME_API_KEY)
    stack.runtime.extra_env |= {"BLOOM_SECRET_KEY": SECRET_KEY, "BLOOM_ACCESS_LOG": "true"}
    membridge_key = stack.membridge.admin_key
    assert membridge_key
    try:
        stack.start()
        configured = stack.http.post(
            "/config",
            json={"membridge_server_url": stack.membridge.url, "admin_key": membridge_key},
        )
        assert configured.status_code == 200, configured.text
        assert stack.http.post("/test-connection").json()["connected"] is True, (
            "the stored (sealed) key must still reach Membridge"
        )
        for name in ("w1", "w2"):
            stack.add_worker(name, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
        ids = [stack.submit(f"echo task {i}", context_id=f"ctx-{i % 2}") for i in range(3)]
        for task_id in ids:
            assert stack.wait(task_id)["status"] == "completed", stack.logs()[-3000:]
        worker_keys = [w.env["BLOOM_WORKER_API_KEY"] for w in stack.workers.values()]
        secrets = {
            "runtime API key": RUNTIME_API_KEY,
            "Membridge admin key": membridge_key,
            "secret key": SECRET_KEY,
            "Anthropic key": ANTHROPIC_KEY,
            **{f"worker key {i}": key for i, key in enumerate(worker_keys)},
        }
        with httpx.Client(base_url=stack.runtime.url, headers=stack.headers, timeout=30) as http:
            answers = gets(http, stack)
        rows = every_row(probe)
        assert any(row.get("action") == "config_updated" for row in rows)
        for worker in stack.workers.values():
            worker.stop()
        logs = {path.name: path.read_text(errors="replace") for path in tmp_path.glob("*.log")}
        assert len(logs) >= 5, sorted(logs)  # model, Membridge, runtime, two workers
        assert "request" in logs[stack.runtime.log_path.name]  # the access log was on
        for what, secret in secrets.items():
            for name, text in logs.items():
                assert secret not in text, f"the {what} is in the log {name}"
            for path, text in answers.items():
                assert secret not in text, f"the {what} is in the answer to GET {path}"
            assert secret not in repr(rows), f"the {what} is stored in the database"
    finally:
        stack.close()
