"""`bloom agents list` and `bloom agents install`, run as a person runs them: subprocesses, their
exit status and output. The CLIs are stand-ins (scripts that print a version; a fake npm that
lays out what the real one does): no model is called, nothing is fetched."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bloom.worker.agents.claude import install as claude_install
from bloom.worker.agents.codex import install as codex_install
from bloom.worker.agents.gemini import install as gemini_install
from tests.support.claude_cache import executable

ROOT = Path(__file__).resolve().parents[2]


def bloom(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`bloom …` with a PATH of our own (the stand-ins, and what runs Python), caches of its
    own and a HOME without logins."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            ("BLOOM_", "ANTHROPIC_", "OPENAI_", "CODEX_", "CLAUDE_", "GEMINI_", "GOOGLE_")
        )
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "agents", *args],
        env={
            **base,
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "BLOOM_CLAUDE_CACHE": str(tmp_path / "claude-cache"),
            "BLOOM_CODEX_CACHE": str(tmp_path / "codex-cache"),
            "BLOOM_GEMINI_CACHE": str(tmp_path / "gemini-cache"),
            "BLOOM_DATA_DIR": str(tmp_path / "data"),
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def version_script(path: Path, said: str) -> Path:
    return executable(path, f"#!/bin/sh\n[ \"$1\" = --version ] && echo '{said}'\nexit 0\n")


def test_list_says_where_each_cli_is_its_version_and_its_login(tmp_path: Path) -> None:
    version_script(tmp_path / "bin" / "codex", "codex-cli 0.170.0")
    version_script(tmp_path / "bin" / "claude", f"{claude_install.PINNED_VERSION} (Claude Code)")
    version_script(tmp_path / "bin" / "gemini", gemini_install.PINNED_VERSION)
    listed = bloom(tmp_path, "list", "--json", OPENAI_API_KEY="sk-test", GEMINI_API_KEY="g")
    assert listed.returncode == 0, listed.stderr
    rows: dict[str, dict[str, Any]] = {row["name"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {"claude", "codex", "gemini"}
    gemini = rows["gemini"]
    assert (gemini["source"], gemini["version"], gemini["logged_in"]) == (
        "path",
        gemini_install.PINNED_VERSION,
        True,
    )
    codex = rows["codex"]
    assert (codex["found"], codex["source"], codex["path"]) == (
        True,
        "path",
        str(tmp_path / "bin" / "codex"),
    )
    assert (codex["version"], codex["pinned_version"]) == ("0.170.0", codex_install.PINNED_VERSION)
    assert codex["logged_in"] is True
    claude = rows["claude"]
    assert claude["version"] == claude_install.PINNED_VERSION
    assert claude["logged_in"] is False  # no key, no login (and `auth status` says nothing)
    assert "ANTHROPIC_API_KEY" in claude["credentials_problem"]

    text = bloom(tmp_path, "list")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[1].startswith("codex   0.170.0 (pinned: ")
    assert lines[1].endswith("not logged in")  # without OPENAI_API_KEY now
    assert "OPENAI_API_KEY" in text.stderr
    assert lines[2].startswith(f"gemini  {gemini_install.PINNED_VERSION}  path: ")
    assert lines[2].endswith("not logged in")  # without GEMINI_API_KEY now
    assert "GEMINI_API_KEY" in text.stderr


def test_list_says_what_is_missing_and_how_to_get_it(tmp_path: Path) -> None:
    listed = bloom(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    assert (
        f"codex   not found (`bloom agents install codex` fetches {codex_install.PINNED_VERSION})"
        in listed.stdout.splitlines()
    )
    rows = {row["name"]: row for row in json.loads(bloom(tmp_path, "list", "--json").stdout)}
    assert rows["codex"]["found"] is False
    assert rows["codex"]["logged_in"] is None


FAKE_NPM = """#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
Path({calls!r}).write_text(" ".join(args))
cache, spec = Path(args[4]), args[5]
name, _, version = spec.rpartition("@")
package = cache / "node_modules" / name
package.mkdir(parents=True)
(package / "package.json").write_text(json.dumps({{"name": name, "version": version}}))
launcher = cache / "node_modules" / ".bin" / {binary!r}
launcher.parent.mkdir(parents=True)
launcher.write_text("#!/bin/sh\\necho " + version + "\\n")
launcher.chmod(0o755)
"""


@pytest.mark.parametrize(
    ("name", "package", "title", "pinned"),
    [
        ("codex", "@openai/codex", "Codex", codex_install.PINNED_VERSION),
        ("gemini", "@google/gemini-cli", "Gemini", gemini_install.PINNED_VERSION),
    ],
)
def test_install_fetches_the_pinned_version_into_the_cache_once(
    tmp_path: Path, name: str, package: str, title: str, pinned: str
) -> None:
    calls = tmp_path / "npm-calls"
    fake = FAKE_NPM.format(python=sys.executable, calls=str(calls), binary=name)
    executable(tmp_path / "bin" / "npm", fake)
    cache = tmp_path / f"{name}-cache"
    done = bloom(tmp_path, "install", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(cache / "node_modules" / ".bin" / name)
    assert calls.read_text().split() == [
        "install", "--no-audit", "--no-fund", "--prefix", str(cache), f"{package}@{pinned}",
    ]  # fmt: skip
    assert f"Fetching the {title} CLI {pinned}" in done.stderr

    calls.unlink()
    again = bloom(tmp_path, "install", name)
    assert again.returncode == 0, again.stderr
    assert "already in the cache" in again.stderr
    assert not calls.exists()  # npm not run again
    listed = {r["name"]: r for r in json.loads(bloom(tmp_path, "list", "--json").stdout)}
    assert (listed[name]["source"], listed[name]["version"]) == ("cache", pinned)


def test_install_fails_clearly(tmp_path: Path) -> None:
    unknown = bloom(tmp_path, "install", "cursor")
    assert unknown.returncode == 2
    assert "no agent CLI named 'cursor': one of claude, codex, gemini" in unknown.stderr
    no_npm = bloom(tmp_path, "install", "codex", PATH=str(tmp_path / "bin"))
    assert no_npm.returncode == 1
    assert "npm is not there to fetch it" in no_npm.stderr
    executable(tmp_path / "bin" / "npm", "#!/bin/sh\necho 'npm ERR! network' >&2\nexit 1\n")
    failing = bloom(tmp_path, "install", "codex", PATH=str(tmp_path / "bin"))
    assert failing.returncode == 1
    assert "failed (exit status 1)" in failing.stderr
