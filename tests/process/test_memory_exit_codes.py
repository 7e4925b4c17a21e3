"""Every `bloom memory` command's exit code, as real processes against a real S3 endpoint, many
times over and four at a time on a loaded machine: the exact code every time, never a signal.

Issue 29, item 9: a secondary's push printed its refusal, then died by SIGABRT (-6, not 3) about
one run in eight under load. An obstore thread completing the last call was still in Python
(`call_soon_threadsafe` writing to the loop's wake-up socket) when the interpreter finalized;
taking the GIL back then means `pthread_exit`, which aborts through Rust frames
(`S3Bucket.close` now waits for such threads)."""

import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bloom.domain.memory import ExitCode
from tests.support.memory import add_observations, make_db
from tests.support.net import closed_port
from tests.support.s3 import Bucket

SECONDARY_PUSHES = 36
EACH = 4
"""Runs of every other command and outcome."""
AT_ONCE = 4
INHERITED = ("BLOOM_", "MINIO_", "MEMBRIDGE_", "CLAUDE_", "PRIMARY_", "ALLOW_", "HOME")


@dataclass(frozen=True)
class Run:
    """One `bloom memory ACTION` as NODE on DB, and the exit code it must end with."""

    action: str
    node: str
    db: Path
    expected: ExitCode
    endpoint: str | None = None
    """Another store than the bucket's (an unreachable one)."""
    as_json: bool = False


@dataclass(frozen=True)
class Ended:
    run: Run
    code: int
    stdout: str
    stderr: str


def memory(run: Run, bucket: Bucket, home: Path) -> Ended:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    env = bucket.env(
        CLAUDE_MEM_DB=str(run.db),
        MEMBRIDGE_NODE_ID=run.node,
        PRIMARY_NODE_ID="n1",
        MEMBRIDGE_CONFIG_ENV=str(home / "no-config.env"),
        HOME=str(home),
        COLUMNS="200",
    )
    if run.endpoint:
        env["MINIO_ENDPOINT"] = run.endpoint
    argv = [sys.executable, "-m", "bloom.cli.main", "memory", run.action, "--project", "mem"]
    done = subprocess.run(
        argv + (["--json"] if run.as_json else []),
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Ended(run, done.returncode, done.stdout, done.stderr)


def test_every_memory_command_ends_with_its_exit_code(s3_bucket: Bucket, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    primary, changed, secondary = (tmp_path / n / "claude-mem.db" for n in ("n1", "n1b", "n2"))
    make_db(primary, observations=20)
    make_db(changed, observations=20)
    add_observations(changed, 3, tag="local")  # the primary's changes, not published
    make_db(secondary, observations=5, tag="n2")
    for setup in (
        Run("push", "n1", primary, ExitCode.OK),
        Run("pull", "n2", secondary, ExitCode.OK),
    ):
        done = memory(setup, s3_bucket, home)  # n1 primary and published; n2 holds the same
        assert done.code == setup.expected, done.stderr

    down = f"http://127.0.0.1:{closed_port()}"
    runs = [Run("push", "n2", secondary, ExitCode.SECONDARY_BLOCKED_PUSH)] * SECONDARY_PUSHES
    runs += [Run("push", "n1", primary, ExitCode.OK)] * EACH  # already up to date
    runs += [Run("pull", "n1", changed, ExitCode.PRIMARY_REFUSED_PULL)] * EACH
    runs += [Run("pull", "n2", secondary, ExitCode.OK)] * EACH  # already up to date
    runs += [Run("status", f"n{1 + i % 2}", secondary, ExitCode.OK) for i in range(EACH)]
    runs += [Run("leadership", f"n{1 + i % 2}", secondary, ExitCode.OK) for i in range(EACH)]
    # each its own node: the store's conditional-write probe is per node
    runs += [Run("doctor", f"d{i}", secondary, ExitCode.OK) for i in range(EACH)]
    runs += [
        Run(action, "n2", secondary, ExitCode.ERROR, endpoint=down)
        for action in ("push", "pull", "status", "doctor", "leadership")
    ]
    runs = [
        Run(r.action, r.node, r.db, r.expected, r.endpoint, as_json=i % 2 == 1)
        for i, r in enumerate(runs)
    ]
    random.Random(29).shuffle(runs)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        ended = list(pool.map(lambda run: memory(run, s3_bucket, home), runs))

    signalled = [e for e in ended if e.code < 0]
    assert not signalled, [(e.run.action, e.code, e.stderr[-500:]) for e in signalled]
    wrong = [e for e in ended if e.code != e.run.expected]
    assert not wrong, [(e.run, e.code, e.stderr[-500:]) for e in wrong]
    for e in ended:
        if e.run.as_json:  # the report reached stdout whole before the exit
            assert json.loads(e.stdout)["code"] == e.run.expected, e.stdout
    blocked = next(e for e in ended if e.code == 3 and not e.run.as_json)
    assert blocked.stderr.startswith("bloom: n2 is secondary for mem (primary: n1): push blocked")
