"""What `bloom` says to a person, as real subprocesses: usage errors name what an option takes
(exit 2), a Membridge URL given for the runtime's is named as Membridge's, and help and errors
wrap at whole words on an 80-column terminal."""

import contextlib
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.membridge import MembridgeProcess
from tests.support.net import closed_port

HELPS = (
    ["--help"],
    ["up", "--help"],
    ["worker", "run", "--help"],
    ["deploy", "render", "--help"],
    ["usage", "--help"],
    ["task", "list", "--help"],
)
"""The widest help: long option and variable names beside narrow columns."""


def bloom(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("COLUMNS", "BLOOM_API_KEY", "RUNTIME_API_KEY", "BLOOM_RUNTIME_URL")
    }
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def words(text: str) -> set[str]:
    return set(re.findall(r"[^\s│╭╮╰╯─]+", text))


@pytest.fixture(scope="module")
def membridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MembridgeProcess]:
    process = MembridgeProcess(tmp_path_factory.mktemp("membridge"))
    process.start()
    yield process
    process.stop()


def test_usage_since_says_what_it_takes() -> None:
    done = bloom("usage", "--since", "yesterday", "--url", f"http://127.0.0.1:{closed_port()}")
    assert done.returncode == 2, done.stderr
    assert "--since takes 'today', a duration back from now" in done.stderr
    assert "2026-11-27" in done.stderr
    assert "'yesterday'" in done.stderr
    assert "must be epoch milliseconds" not in done.stderr  # not the API's parameter text


def test_usage_since_takes_a_date_before_calling_the_runtime() -> None:
    """A date passes the check: the next failure is the runtime that is not there."""
    done = bloom("usage", "--since", "2026-11-27", "--url", f"http://127.0.0.1:{closed_port()}")
    assert done.returncode == 2
    assert "cannot reach the runtime" in done.stderr


@pytest.mark.parametrize("suffix", ["", "/"])
def test_a_membridge_url_is_named_as_membridge(membridge: MembridgeProcess, suffix: str) -> None:
    """Membridge refuses the runtime's path (401, keyed); its /health says whose URL it is."""
    done = bloom("task", "list", "--url", membridge.url + suffix)
    assert done.returncode == 2, done.stderr
    assert "answers as Membridge, not as the runtime" in done.stderr
    assert "wants an API key" not in done.stderr


@pytest.mark.parametrize("args", HELPS, ids=" ".join)
def test_help_wraps_whole_words_at_80_columns(args: list[str]) -> None:
    narrow, wide = bloom(*args, columns=80), bloom(*args, columns=400)
    assert narrow.returncode == wide.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert words(narrow.stdout) - words(wide.stdout) == set()  # no word cut, none elided
    assert "…" not in narrow.stdout


def on_terminal(*args: str, columns: int) -> tuple[int, str]:
    """`bloom` with its stderr on a terminal `columns` wide (a pty): exit status and stderr."""
    env = {key: value for key, value in os.environ.items() if key not in ("BLOOM_API_KEY",
           "RUNTIME_API_KEY", "BLOOM_RUNTIME_URL")}  # fmt: skip
    env["COLUMNS"] = str(columns)
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bloom.cli.main", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=follower,
            timeout=60,
            check=False,
        )
        os.close(follower)
        said = b""
        with contextlib.suppress(OSError):  # EIO: the terminal's other end has closed
            while chunk := os.read(leader, 65536):
                said += chunk
    finally:
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;]*m", "", said.decode()).replace("\r", "")
    return done.returncode, text


def test_errors_wrap_whole_words_on_an_80_column_terminal() -> None:
    """On a terminal an error wraps at whole words; piped (scripts, logs) it stays one line."""
    for args in (
        ["usage", "--since", "yesterday"],
        ["usage", "--by", "nothing-of-the-sort"],
        ["task", "list", "--url", f"http://127.0.0.1:{closed_port()}"],
    ):
        (status, narrow), wide = on_terminal(*args, columns=80), bloom(*args, columns=400)
        assert status == wide.returncode == 2, args
        assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
        assert words(narrow) == words(wide.stderr), args
    piped = bloom("usage", "--since", "yesterday", columns=80).stderr
    assert piped.startswith("bloom: ")
    assert len(piped.strip().splitlines()) == 1  # our own errors: one line for scripts
