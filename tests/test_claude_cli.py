"""Finding the Claude CLI (BLOOM_CLAUDE_BIN, PATH, the project cache) and fetching it with npm,
with a fake npm that lays out what the real one does."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bloom.cli.main import app
from bloom.worker import claude_cli


def executable(path: Path, body: str = "#!/bin/sh\necho fake\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def lay_out(cache: Path, version: str = claude_cli.PINNED_VERSION) -> Path:
    """What `npm install @anthropic-ai/claude-code@<version>` leaves in the cache."""
    package = cache / "node_modules" / "@anthropic-ai" / "claude-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        json.dumps({"name": claude_cli.PACKAGE, "version": version})
    )
    suffix = claude_cli.platform_suffix()
    assert suffix is not None
    return executable(cache / "node_modules" / "@anthropic-ai" / f"claude-code-{suffix}" / "claude")


@pytest.fixture
def no_claude_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH holds only a directory of our own (empty unless a test adds to it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    for name in (*claude_cli.BIN_ENV, claude_cli.CACHE_ENV):
        monkeypatch.delenv(name, raising=False)
    return bin_dir


def test_cache_dir_default_and_env():
    assert claude_cli.cache_dir({}) == Path(".cache/claude-cli")
    assert claude_cli.cache_dir({"BLOOM_CLAUDE_CACHE": "/x/y"}) == Path("/x/y")


def test_found_in_the_cache_only_at_the_pinned_version(no_claude_on_path, tmp_path):
    cache = tmp_path / "cache"
    assert claude_cli.find_claude(cache) is None
    binary = lay_out(cache)
    assert claude_cli.find_claude(cache) == binary.resolve()
    old = tmp_path / "old"
    lay_out(old, "1.0.0")
    assert claude_cli.find_claude(old) is None


def test_path_comes_before_the_cache(no_claude_on_path, tmp_path):
    cache = tmp_path / "cache"
    lay_out(cache)
    on_path = executable(no_claude_on_path / "claude")
    assert claude_cli.find_claude(cache) == on_path


def test_bloom_claude_bin_wins_and_must_exist(no_claude_on_path, tmp_path):
    mine = executable(tmp_path / "my-claude")
    assert claude_cli.ensure_claude(print, {"BLOOM_CLAUDE_BIN": str(mine)}) == (str(mine), False)
    with pytest.raises(claude_cli.ClaudeCliError, match="not an executable"):
        claude_cli.ensure_claude(print, {"BLOOM_CLAUDE_BIN": str(tmp_path / "missing")})


def test_without_npm_the_error_says_what_to_do(no_claude_on_path, tmp_path):
    with pytest.raises(claude_cli.ClaudeCliError) as failed:
        claude_cli.install_claude(tmp_path / "cache", print)
    message = str(failed.value)
    assert "Node.js" in message
    assert "BLOOM_CLAUDE_BIN" in message


def test_install_runs_npm_into_the_cache_and_says_so(no_claude_on_path, tmp_path):
    calls = tmp_path / "npm-calls"
    suffix = claude_cli.platform_suffix()
    root = Path(__file__).resolve().parents[1]
    npm = executable(
        no_claude_on_path / "npm",
        f"""#!{sys.executable}
import sys
from pathlib import Path
sys.path.insert(0, {str(root)!r})
from tests.test_claude_cli import lay_out
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


def test_bloom_claude_path_command(no_claude_on_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    missing = CliRunner().invoke(app, ["claude", "path"], env={"BLOOM_CLAUDE_CACHE": str(cache)})
    assert missing.exit_code == 1
    assert "bloom claude install" in missing.stderr
    binary = lay_out(cache)
    found = CliRunner().invoke(app, ["claude", "path"], env={"BLOOM_CLAUDE_CACHE": str(cache)})
    assert found.exit_code == 0
    assert found.stdout.strip() == str(binary.resolve())
    cached = CliRunner().invoke(app, ["claude", "install"], env={"BLOOM_CLAUDE_CACHE": str(cache)})
    assert cached.exit_code == 0
    assert "already in the cache" in cached.stderr
    assert os.access(cached.stdout.strip(), os.X_OK)
