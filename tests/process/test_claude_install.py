"""Fetching the Claude CLI with npm: a fake npm (a child process) that lays out what the real
one does."""

import sys
from pathlib import Path

import pytest

from bloom.worker.agents.claude import install as claude_cli
from tests.support.claude_cache import executable


def test_install_runs_npm_into_the_cache_and_says_so(no_claude_on_path, tmp_path):
    calls = tmp_path / "npm-calls"
    suffix = claude_cli.platform_suffix()
    root = Path(__file__).resolve().parents[2]
    npm = executable(
        no_claude_on_path / "npm",
        f"""#!{sys.executable}
import sys
from pathlib import Path
sys.path.insert(0, {str(root)!r})
from tests.support.claude_cache import lay_out
Path({str(calls)!r}).write_text(" ".join(sys.argv[1:]))
lay_out(Path(sys.argv[5]), sys.argv[6].rpartition("@")[2])
""",
    )
    said: list[str] = []
    cache = tmp_path / "cache"
    binary = claude_cli.install_claude(cache, said.append)
    assert binary == (cache / f"node_modules/@anthropic-ai/claude-code-{suffix}/claude").resolve()
    assert calls.read_text().split() == [
        "install", "--no-audit", "--no-fund", "--prefix", str(cache),
        f"@anthropic-ai/claude-code@{claude_cli.PINNED_VERSION}",
    ]  # fmt: skip
    assert said[0].startswith(f"Fetching the Claude CLI {claude_cli.PINNED_VERSION} into {cache}")
    assert said[-1].startswith(f"Claude CLI {claude_cli.PINNED_VERSION} ready: ")
    # found from now on, without npm
    assert claude_cli.ensure_claude(said.append, {"BLOOM_CLAUDE_CACHE": str(cache)}) == (
        str(binary),
        False,
    )
    assert npm.exists()


def test_a_failing_npm_is_a_clear_error(no_claude_on_path, tmp_path):
    executable(no_claude_on_path / "npm", "#!/bin/sh\necho 'npm ERR! network' >&2\nexit 1\n")
    with pytest.raises(claude_cli.ClaudeCliError, match="failed \\(exit status 1\\)"):
        claude_cli.install_claude(tmp_path / "cache", print)
