"""`bloom audit export` killed with kill -9 between an object's upload and its checkpoint: the next
export adopts the object, and every audit entry is in the bucket exactly once.

The kill lands in that window for certain: the test holds SQLite's write lock, so the exporter
reads its entries and uploads them, then waits for the lock to write its checkpoint, and is
killed there."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.support.s3 import Bucket
from tests.support.server import queue_tasks


def exported_ids(bucket: Bucket) -> list[str]:
    return [entry["id"] for entry in bucket.audit_entries()]


def test_kill_9_between_upload_and_checkpoint(tmp_path: Path, s3_bucket: Bucket) -> None:
    database = tmp_path / "runtime.db"
    queue_tasks(f"sqlite:///{database}", tmp_path, 5)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "MINIO_", "DATABASE"))
    } | s3_bucket.env(
        DATABASE_URL=f"sqlite:///{database}",
        BLOOM_DATA_DIR=str(tmp_path),
        BLOOM_AUDIT_EXPORT_SETTLE_SEC="0",
        BLOOM_AUDIT_EXPORT_ROWS="3",
    )
    export = [sys.executable, "-m", "bloom.cli.main", "audit", "export"]

    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the exporter can read and upload, not checkpoint
    exporter = subprocess.Popen(export, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not exported_ids(s3_bucket):
            assert exporter.poll() is None, exporter.stderr.read() if exporter.stderr else ""
            assert time.monotonic() < deadline, "no object was uploaded"
            time.sleep(0.1)
        exporter.send_signal(signal.SIGKILL)
        exporter.wait(timeout=10)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    first = exported_ids(s3_bucket)
    assert len(first) == 3  # one object, and no checkpoint for it

    again = subprocess.run(export, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    every = [row[0] for row in sqlite3.connect(database).execute("SELECT id FROM audit_logs")]
    ids = exported_ids(s3_bucket)
    assert sorted(ids) == sorted(every)
    assert len(ids) == len(set(ids)) == 5
    assert ids[:3] == first
