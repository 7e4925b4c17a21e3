"""Finding the Claude CLI (BLOOM_CLAUDE_BIN, PATH, the project cache), with a cache laid out as
npm leaves it."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bloom.cli.main import app
from bloom.worker.agents.claude import install as claude_cli
from tests.support.claude_cache import executable, lay_out


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
