"""What a worker's agent surface takes and where it listens: plain branch names only (for a
clone and a self-update, and in the allow-list an admin writes), and never beyond loopback
without an agent key unless told `--insecure`."""

import re

import pytest
from pydantic import ValidationError

from bloom.domain.branch import is_plain_branch
from bloom.web.settings import SettingsError
from bloom.worker.settings import WorkerSettings, load_worker_settings

REFUSED = [
    "refs/pull/1/head",
    "refs/heads/main",
    "refs",
    "FETCH_HEAD",
    "HEAD",
    "ORIG_HEAD",
    "origin/HEAD",
    "main@{1}",
    "@{-1}",
    "@",
    "main~1",
    "main^",
    "main^{tree}",
    "a:b",
    "-x",
    "--upload-pack=x",
    "a..b",
    ".hidden",
    "a/.b",
    "a.lock",
    "a/b.lock/c",
    "a/",
    "/a",
    "a//b",
    "a.",
    "",
    "a b",
    "a\tb",
    "a\\b",
    "a*b",
    "a?b",
    "a[b",
    "main;rm -rf ~",
    "x" * 256,
]
ACCEPTED = ["main", "master", "feature/x", "release-1.2", "v1.0", "user/fix_it", "pull/1/head"]
"""`pull/1/head` is a plain name: it names `refs/heads/pull/1/head` only (never refs/pull/…)."""


@pytest.mark.parametrize("name", REFUSED)
def test_ref_expressions_and_options_are_not_plain_branches(name: str) -> None:
    assert not is_plain_branch(name)


@pytest.mark.parametrize("name", [*ACCEPTED, "x" * 255])
def test_plain_branches(name: str) -> None:
    assert is_plain_branch(name)


def test_the_update_branches_an_admin_allows_are_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WorkerSettings().update_branches == []
    assert WorkerSettings(update_branches=["release"]).update_branches == ["release"]
    with pytest.raises(ValidationError, match="not a plain branch name"):
        WorkerSettings(update_branches=["release", "refs/pull/1/head"])
    monkeypatch.setenv("BLOOM_WORKER_UPDATE_BRANCHES", '["FETCH_HEAD"]')
    with pytest.raises(SettingsError, match=r"BLOOM_WORKER_UPDATE_BRANCHES: .*'FETCH_HEAD'"):
        load_worker_settings()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "node-a.example.org"])
def test_an_open_agent_surface_needs_a_key_or_insecure(host: str) -> None:
    open_surface = WorkerSettings(agent_port=8001, agent_host=host)
    assert open_surface.agent_open_to_network
    refusal = re.escape(f"refusing to serve the agent surface on {host} without an agent key")
    with pytest.raises(SettingsError, match=refusal):
        open_surface.check_exposure()
    WorkerSettings(agent_port=8001, agent_host=host, insecure=True).check_exposure()
    keyed = WorkerSettings(agent_port=8001, agent_host=host, agent_key="k")
    assert not keyed.agent_open_to_network
    keyed.check_exposure()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_on_loopback_or_without_a_surface_no_key_is_needed(host: str) -> None:
    WorkerSettings(agent_port=8001, agent_host=host).check_exposure()
    WorkerSettings(agent_host="0.0.0.0").check_exposure()  # no port: no surface
