"""`bloom memory` in-process (Typer's runner) on a reference-style `config.env`: the reference
tool's exit codes, one red line per refusal, `--project` over `CLAUDE_PROJECT_ID`, `--json`."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from bloom.cli.main import app
from bloom.domain.ids import canonical_id
from tests.support.memory import add_observations, make_db
from tests.support.s3 import Bucket

SYNC_NAMES = ("MINIO_", "MEMBRIDGE_", "CLAUDE_", "PRIMARY_", "ALLOW_", "BLOOM_ENV_FILE")


@pytest.fixture(autouse=True)
def no_inherited_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(SYNC_NAMES):
            monkeypatch.delenv(name)


def config_env(bucket: Bucket, root: Path, node: str) -> tuple[Path, Path]:
    db = root / node / "claude-mem.db"
    lines = [f"export {k}={v}" for k, v in bucket.env().items()]
    lines += ["CLAUDE_PROJECT_ID=other", f"CLAUDE_MEM_DB='{db}'", f"MEMBRIDGE_NODE_ID={node}"]
    config = root / f"{node}.env"
    config.write_text("\n".join(lines) + "\n")
    return config, db


def memory(monkeypatch: pytest.MonkeyPatch, config: Path | None, *args: str) -> Result:
    monkeypatch.setenv("MEMBRIDGE_CONFIG_ENV", str(config or "/nonexistent"))
    return CliRunner().invoke(app, ["memory", *args, "--project", "mem"])


def test_exit_codes_and_one_line_refusals(
    s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (c1, db1), (c2, db2) = (
        config_env(s3_bucket, tmp_path, "n1"),
        config_env(s3_bucket, tmp_path, "n2"),
    )
    make_db(db1, observations=3)
    pushed = memory(monkeypatch, c1, "push")
    assert pushed.exit_code == 0, pushed.stderr
    assert pushed.stderr.startswith("pushed ")
    prefix = f"projects/{canonical_id('mem')}/sqlite/"
    assert f"{prefix}manifest.json" in s3_bucket.keys(prefix), "--project named the keys"

    make_db(db2, observations=1, tag="n2")
    blocked = memory(monkeypatch, c2, "push")
    assert blocked.exit_code == 3
    assert blocked.stderr.splitlines()[0] == (
        "bloom: n2 is secondary for mem (primary: n1): push blocked; promote this node from "
        "the control plane, or set ALLOW_SECONDARY_PUSH=1"
    )
    add_observations(db1, 1)
    refused = memory(monkeypatch, c1, "pull")
    assert refused.exit_code == 2
    assert "is the primary for mem" in refused.stderr
    assert memory(monkeypatch, c2, "pull").exit_code == 0

    status = memory(monkeypatch, c2, "status", "--json")
    assert status.exit_code == 0
    report = json.loads(status.stdout)
    assert (report["role"], report["in_sync"], report["code"]) == ("secondary", True, 0)
    doctor = memory(monkeypatch, c2, "doctor")
    assert doctor.exit_code == 0, doctor.stderr
    assert "  conditional_writes: ok: If-None-Match honoured" in doctor.stderr.splitlines()
    leadership = json.loads(memory(monkeypatch, c2, "leadership", "--json").stdout)
    assert leadership["lease"]["primary_node_id"] == "n1"


def test_missing_settings_are_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = memory(monkeypatch, None, "push")
    assert missing.exit_code == 1
    assert missing.stderr.strip().splitlines() == [
        "bloom: MINIO_ENDPOINT, MINIO_ACCESS_KEY, MINIO_SECRET_KEY not set"
    ]
