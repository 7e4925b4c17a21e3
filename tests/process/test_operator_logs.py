"""What an operator reads at INFO: requests that change something, not routine polling (a health
probe, an empty long-poll claim, a heartbeat, a scrape), which go to DEBUG; and one line per state
change, with its ids."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import RuntimeProcess

RT = "/api/runtime"


def access_lines(log: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "bloom.access"]


@pytest.mark.parametrize("level", ["info", "debug"])
def test_routine_requests_are_debug(tmp_path: Path, level: str) -> None:
    runtime = RuntimeProcess(
        f"sqlite:///{tmp_path}/runtime.db",
        tmp_path,
        BLOOM_ACCESS_LOG="true",
        BLOOM_LOG_LEVEL=level,
        BLOOM_LOG_FORMAT="json",
    )
    runtime.start()
    try:
        with httpx.Client(base_url=runtime.url) as http:
            worker = {"name": "w1", "capabilities": {"claude_cli": True, "max_concurrency": 1}}
            assert http.post(f"{RT}/workers", json=worker).status_code == 201  # new: INFO
            assert http.post(f"{RT}/workers", json=worker).status_code == 200  # presence
            assert http.post(f"{RT}/workers/w1/claim", json={"wait_seconds": 0}).status_code == 204
            body = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
            task = http.post(f"{RT}/llm-tasks", json=body).json()
            grant = http.post(f"{RT}/workers/w1/claim", json={"wait_seconds": 0})
            assert grant.status_code == 200
            lease = {"lease_id": grant.json()["lease"]["id"], "worker_id": "w1"}
            assert (
                http.post(f"{RT}/llm-tasks/{task['id']}/heartbeat", json=lease).status_code == 200
            )
            assert http.get(f"{RT}/health").status_code == 200
            assert http.get("/metrics").status_code == 200
    finally:
        runtime.stop()
    seen = [
        (line["level"], line["method"], line["path"], line["status"])
        for line in access_lines(runtime.log())
    ]
    info = [entry for entry in seen if entry[0] == "info"]
    assert info == [
        ("info", "POST", f"{RT}/workers", 201),
        ("info", "POST", f"{RT}/llm-tasks", 201),
        ("info", "POST", f"{RT}/workers/w1/claim", 200),
    ]
    changes = [
        (line["event"], line["id"])
        for line in map(
            json.loads, filter(lambda text: text.startswith("{"), runtime.log().splitlines())
        )
        if line.get("logger") == "bloom.audit" and line["level"] == "info"
    ]
    lease_id = lease["lease_id"]
    assert changes == [
        ("worker_registered", "w1"),
        ("task_created", task["id"]),
        ("task_leased", lease_id),
        ("task_running", task["id"]),
    ]
    debug = {(method, path.rsplit("/", 1)[-1]) for lvl, method, path, _ in seen if lvl == "debug"}
    routine = {("GET", "health"), ("POST", "workers"), ("POST", "claim"), ("POST", "heartbeat")}
    assert debug == (set() if level == "info" else routine | {("GET", "metrics")})
