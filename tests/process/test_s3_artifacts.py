"""The runtime's S3 store as a process: `bloom runtime serve` refuses in one line to start on an
unreachable store, or starts degraded when told to. (`bloom up` with the MINIO_* variables, and
`bloom artifact get`, are in test_up.py.)"""

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.databases import NO_MEMBRIDGE
from tests.support.net import closed_port
from tests.support.s3 import Bucket
from tests.support.server import RuntimeProcess, queue_tasks


def bloom(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "RUNTIME_", "MINIO_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", *args],
        env=clean | env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_runtime_refuses_to_start_on_an_unreachable_store(tmp_path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = Bucket(endpoint, "bloom-artifacts").env(
        BLOOM_ARTIFACT_STORE="s3", BLOOM_S3_TIMEOUT_SEC="1"
    )
    refused = bloom(
        "runtime", "serve", "--port", str(closed_port()),
        env=env | {"BLOOM_DATA_DIR": str(tmp_path), "BLOOM_MEMBRIDGE_URL": NO_MEMBRIDGE},
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"bloom: artifact store: object store {endpoint} unreachable")


def test_a_degraded_start_serves_and_refuses_completes(tmp_path):
    env = Bucket(f"http://127.0.0.1:{closed_port()}", "bloom-artifacts").env(
        BLOOM_ARTIFACT_STORE="s3", BLOOM_S3_REQUIRED="false", BLOOM_S3_TIMEOUT_SEC="1"
    )
    runtime = RuntimeProcess(f"sqlite:///{tmp_path}/runtime.db", tmp_path, **env)
    runtime.start()
    try:
        api = f"{runtime.url}/api/runtime"
        task = httpx.post(
            f"{api}/llm-tasks", json={"context_id": "c", "agent_slug": "a", "prompt": "p"}
        )
        worker = {"name": "w1", "capabilities": {"claude_cli": True, "max_concurrency": 1}}
        httpx.post(f"{api}/workers", json=worker)
        task_id = task.json()["id"]
        assert httpx.post(f"{api}/llm-tasks/{task_id}/lease").status_code == 201
        complete = httpx.post(
            f"{api}/llm-tasks/{task_id}/complete",
            json={"status": "success", "output": "x", "metrics": {"duration_ms": 1}},
            timeout=30,
        )
        assert complete.status_code == 503
        assert complete.headers["retry-after"] == "5"
        assert httpx.get(f"{api}/llm-tasks/{task_id}").json()["status"] == "leased"
    finally:
        runtime.stop()
    assert "artifact_store_unreachable" in runtime.log()


def test_bloom_audit_export_on_demand(tmp_path, s3_bucket: Bucket):
    queue_tasks(f"sqlite:///{tmp_path}/runtime.db", tmp_path, 3)
    env = s3_bucket.env(
        DATABASE_URL=f"sqlite:///{tmp_path}/runtime.db",
        BLOOM_DATA_DIR=str(tmp_path),
        BLOOM_AUDIT_EXPORT_SETTLE_SEC="0",
    )
    first = bloom("audit", "export", env=env, cwd=tmp_path)
    assert (first.returncode, first.stderr) == (0, "exported 3 audit entries in 1 objects\n")
    again = bloom("audit", "export", env=env, cwd=tmp_path)
    assert again.stderr == "exported 0 audit entries in 0 objects\n"
    no_store = bloom("audit", "export", env={"BLOOM_DATA_DIR": str(tmp_path)}, cwd=tmp_path)
    assert no_store.returncode == 1
    assert "audit export needs the object store" in no_store.stderr
