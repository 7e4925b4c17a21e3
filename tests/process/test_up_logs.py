"""What a quiet `bloom up --demo-model` prints: one line per start-up step, in one format for
every process (console for people, JSON lines with BLOOM_LOG_FORMAT=json), no Alembic plugin
lines, no 404s while the worker starts, nothing at all while it idles; then a task, whose model
call is the model's one access line."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.process.test_up import Up, claude_bin, started  # noqa: F401 (fixtures)

CHILDREN = ("model", "membridge", "runtime", "worker")
CHILD_LINE = re.compile(r"^(\w+)\s*\| (.*)$")
CONSOLE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[(?P<level>debug|info|warning|error|critical)\s*\] "
    r"(?P<event>.+?)\s+\[(?P<logger>[\w.]+)\](?P<rest>.*)$"
)
IDLE_SEC = 22  # two rounds of the runtime's worker sync (every 10 s) and more


def parsed(body: str, fmt: str) -> dict[str, str]:
    """A child's line as level, event, logger and the request's path, or AssertionError."""
    if fmt == "json":
        record = json.loads(body)
        assert {"timestamp", "level", "event", "logger"} <= set(record), body
        return {k: str(record.get(k, "")) for k in ("level", "event", "logger", "path", "status")}
    match = CONSOLE.match(body)
    assert match, f"not the console format: {body!r}"
    rest = match["rest"]
    path, status = re.search(r"\bpath=(\S+)", rest), re.search(r"\bstatus=(\d+)", rest)
    return match.groupdict() | {
        "path": path[1] if path else "",
        "status": status[1] if status else "",
    }


def child_lines(lines: list[str], fmt: str) -> list[tuple[str, dict[str, str]]]:
    """(child, its record) for each child's line; any other line is bloom up's banner."""
    records = []
    for line in lines:
        match = CHILD_LINE.match(line)
        if match and match[1] in CHILDREN:
            records.append((match[1], parsed(match[2], fmt)))
        else:
            assert line == "BLOOM is up" or line.startswith("  "), line
    return records


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_quiet_bloom_up_prints_one_line_per_step_and_nothing_while_idle(
    tmp_path: Path,
    claude_bin: str,  # noqa: F811
    started: list[Up],  # noqa: F811
    fmt: str,
) -> None:
    up = Up(tmp_path, "--demo-model", BLOOM_CLAUDE_BIN=claude_bin, BLOOM_LOG_FORMAT=fmt)
    started.append(up)
    up.wait_for("BLOOM is up")
    idle: list[str] = []
    if fmt == "console":  # what is logged does not depend on the format: quiet once is enough
        time.sleep(5)  # the worker's registration with Membridge may follow the banner
        settled = len(up.out)
        time.sleep(IDLE_SEC)
        idle = up.out[settled:]
    done = subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "task", "submit", "hello", "--wait"],
        env={k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "RUNTIME_"))}
        | {"BLOOM_RUNTIME_URL": up.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + up.text()
    up.process.send_signal(signal.SIGINT)
    assert up.finish() == 0, up.text()

    assert idle == [], f"lines while idle:\n{up.text()}"
    banner = up.out.index("BLOOM is up")
    starting = child_lines(up.out[:banner], fmt)
    records = child_lines(up.out, fmt)  # every line of every child in the one format
    assert not [r for _, r in records if r["logger"].startswith("alembic")], up.text()
    assert not [r for _, r in records if r["status"] == "404"], up.text()
    steps = Counter((child, r["logger"], r["event"], r["path"]) for child, r in starting)
    assert [step for step, n in steps.items() if n > 1] == [], up.text()  # one line per step
    events = {(child, r["event"]) for child, r in records}
    for server in ("model", "membridge", "runtime"):  # started, and stopped, in a line each
        assert sum(c == server and e.startswith("Uvicorn running") for c, e in events) == 1
        assert (server, "Shutting down") in events
    for server in ("membridge", "runtime"):
        assert any(c == server and e.startswith("schema migrated") for c, e in events)
    assert ("worker", "worker_ready") in events
    assert len(starting) <= 12, up.text()  # 9 today
    model_requests = [(r["event"], r["path"]) for c, r in records if c == "model"]
    assert [p for e, p in model_requests if e == "request"] == ["/v1/messages"], up.text()
