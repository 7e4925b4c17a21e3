"""Three nodes on one machine (three data dirs, one bucket), each configured by a reference-style
`config.env`, converge to the primary's database after each push through the real
`bloom memory` commands in child processes."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.memory import add_observations, content_sha, count, make_db
from tests.support.s3 import Bucket


def bloom_memory(*args: str, configs: list[Path]) -> list[subprocess.CompletedProcess[str]]:
    """`bloom memory ARGS --project mem` on each node at once (one child per config.env)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BLOOM_", "MINIO_", "MEMBRIDGE_", "CLAUDE_", "PRIMARY_", "ALLOW_"))
    }
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bloom.cli.main", "memory", *args, "--project", "mem"],
            env=clean | {"MEMBRIDGE_CONFIG_ENV": str(config), "COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for config in configs
    ]
    done = []
    for child in children:
        out, err = child.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(child.args, child.returncode, out, err))
    return done


def node_config(bucket: Bucket, root: Path, name: str) -> tuple[Path, Path]:
    """The node's config.env (as the reference's bootstrap writes it) and its database path."""
    db = root / name / ".claude-mem" / "claude-mem.db"
    lines = [f"export {k}={v}" for k, v in bucket.env().items()] + [
        "CLAUDE_PROJECT_ID=other-project",  # --project wins
        f'CLAUDE_MEM_DB="{db}"',
        f"MEMBRIDGE_NODE_ID={name}",
        "# a comment, as bootstrap writes",
    ]
    config = root / name / "config.env"
    config.parent.mkdir(parents=True)
    config.write_text("\n".join(lines) + "\n")
    return config, db


def test_three_nodes_converge_on_the_primarys_database(s3_bucket: Bucket, tmp_path: Path) -> None:
    """n1 bootstraps as primary with its first push; after each push, n2 and n3 pull (at once)
    and hold the same content. (Exit codes and messages: integration/test_memory_cli.py.)"""
    (c1, db1), (c2, db2), (c3, db3) = (
        node_config(s3_bucket, tmp_path, n) for n in ("n1", "n2", "n3")
    )
    make_db(db1, observations=30)
    for round_, more in enumerate((0, 12)):
        add_observations(db1, more)
        [pushed] = bloom_memory("push", configs=[c1])
        assert pushed.returncode == 0, pushed.stderr
        pulls = bloom_memory("pull", configs=[c2, c3])
        assert [p.returncode for p in pulls] == [0, 0], [p.stderr for p in pulls]
        expected = content_sha(db1, tmp_path)
        assert content_sha(db2, tmp_path) == content_sha(db3, tmp_path) == expected, round_
    assert [count(db) for db in (db1, db2, db3)] == [42, 42, 42]
