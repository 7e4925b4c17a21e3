"""The worker's `/clone` on its agent surface (served on a real port), with real git against a
repository served over dumb HTTP: refused unless opted in (and keyed), the key required, the
target a directory directly in the repositories' base (by path components), outside any
checkout, and still so once cloned; plain branch names only; a clone, then a pull."""

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from bloom.domain.branch import is_plain_branch
from bloom.worker.agent_http import AgentSurface, serving
from bloom.worker.settings import WorkerSettings
from tests.support.agent import runs_nothing
from tests.support.git import GitServer, git
from tests.support.net import free_port

KEY = "agent-key-for-clone-tests"
AUTH = {"X-MEMBRIDGE-AGENT": KEY}


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "home" / "projects"


@asynccontextmanager
async def agent(settings: WorkerSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The worker's agent surface served on its port, and a client of it."""
    async with serving(AgentSurface(settings, runs_nothing, list)):
        url = f"http://127.0.0.1:{settings.agent_port}"
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http


@pytest.fixture
async def cloner(base: Path) -> AsyncIterator[httpx.AsyncClient]:
    """An agent that clones (opted in, with a key), under `base`."""
    settings = WorkerSettings(
        name="n1", agent_port=free_port(), agent_key=KEY, allow_clone=True, repos_base=base
    )
    async with agent(settings) as http:
        yield http


@pytest.mark.parametrize(
    ("opted_in", "key", "said"),
    [(False, KEY, "--allow-clone"), (True, "", "needs an agent key")],
    ids=["not-opted-in", "no-key"],
)
async def test_clone_is_refused_unless_opted_in_with_a_key(
    base: Path, opted_in: bool, key: str, said: str
) -> None:
    settings = WorkerSettings(
        name="n1", agent_port=free_port(), agent_key=key, allow_clone=opted_in, repos_base=base
    )
    async with agent(settings) as http:
        body = {"repo_url": "https://example.invalid/r.git", "project_name": "r"}
        refused = await http.post("/clone", json=body, headers=AUTH)
        assert refused.status_code == 403
        assert said in refused.json()["detail"]
        assert (await http.get("/health")).json()["capabilities"]["clone"] is False
    assert not base.exists()


async def test_the_agent_key_is_required(cloner: httpx.AsyncClient) -> None:
    body = {"repo_url": "https://example.invalid/r.git", "project_name": "r"}
    assert (await cloner.post("/clone", json=body)).status_code == 401
    wrong = {"X-MEMBRIDGE-AGENT": KEY + "x"}
    assert (await cloner.post("/clone", json=body, headers=wrong)).status_code == 401
    assert (await cloner.get("/health")).json()["capabilities"]["clone"] is True


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"target_path": "../projects-evil/r"}, "must be within"),
        ({"target_path": "/tmp/elsewhere"}, "must be within"),
        ({"target_path": "."}, "must be within"),
        ({"project_name": ".."}, "must be within"),
        ({"project_name": "a b"}, "project_name"),
        ({"project_name": "a/b"}, "project_name"),
        ({"repo_url": "file:///etc"}, "repo_url"),
        ({"repo_url": "--upload-pack=touch /tmp/x"}, "repo_url"),
        ({"branch": "--upload-pack=x"}, "branch"),
        ({"branch": "a..b"}, "branch"),
        ({"branch": "main;rm -rf ~"}, "branch"),
        *(
            ({"branch": name}, "not a plain branch name")
            for name in ("refs/pull/1/head", "FETCH_HEAD", "HEAD", "main@{1}", "main~1", "a:b")
        ),
        ({"target_path": "work/r"}, "directly in"),
        ({"target_path": ".claude"}, "directly in"),
        ({"project_name": ".git"}, "directly in"),
        ({"colour": "blue"}, "Unknown field: colour"),
    ],
)
async def test_bad_requests_and_escapes_are_400(
    cloner: httpx.AsyncClient, base: Path, change: dict[str, str], said: str
) -> None:
    body = {"repo_url": "https://example.invalid/r.git", "project_name": "r"} | change
    refused = await cloner.post("/clone", json=body, headers=AUTH)
    assert refused.status_code == 400, refused.text
    assert said in refused.json()["detail"]
    assert refused.json()["ok"] is False


async def test_a_symlink_out_of_the_base_is_refused(
    cloner: httpx.AsyncClient, base: Path, tmp_path: Path
) -> None:
    """The prefix check of the reference passes `~/projects-evil`; resolved components do not,
    nor a link inside the base that points out of it."""
    base.mkdir(parents=True)
    (tmp_path / "home" / "projects-evil").mkdir()
    (base / "link").symlink_to(tmp_path / "home" / "projects-evil")
    for target in (str(tmp_path / "home" / "projects-evil" / "r"), "link/r"):
        body = {"repo_url": "https://x.invalid/r.git", "project_name": "r", "target_path": target}
        refused = await cloner.post("/clone", json=body, headers=AUTH)
        assert refused.status_code == 400, target
    assert list((tmp_path / "home" / "projects-evil").iterdir()) == []


async def test_a_clone_then_a_pull_of_a_repository_over_http(
    cloner: httpx.AsyncClient, base: Path, git_server: GitServer
) -> None:
    url = git_server.repository("demo", {"README.md": "first\n"})
    body = {"repo_url": url, "project_name": "demo"}
    cloned = await cloner.post("/clone", json=body, headers=AUTH)
    assert cloned.status_code == 200, cloned.text
    answer = cloned.json()
    assert answer | {"stdout": "", "stderr": ""} == {
        "ok": True, "action": "clone", "path": str((base / "demo").resolve()),
        "project_name": "demo", "stdout": "", "stderr": "", "detail": "Cloned",
    }  # fmt: skip
    assert (base / "demo" / "README.md").read_text() == "first\n"

    git_server.commit("demo", {"README.md": "second\n"})
    pulled = await cloner.post("/clone", json=body, headers=AUTH)
    assert pulled.status_code == 200, pulled.text
    assert (pulled.json()["action"], pulled.json()["ok"]) == ("pull", True)
    assert pulled.json()["detail"] == "Existing repo updated via git pull"
    assert (base / "demo" / "README.md").read_text() == "second\n"


async def test_a_branch_a_target_path_and_a_failing_clone(
    cloner: httpx.AsyncClient, base: Path, git_server: GitServer
) -> None:
    url = git_server.repository("demo", {"a.txt": "main\n"})
    git_server.commit("demo", {"a.txt": "feature\n"}, branch="feature")
    body = {"repo_url": url, "project_name": "demo", "target_path": "demo-f"}
    cloned = await cloner.post("/clone", json=body | {"branch": "feature"}, headers=AUTH)
    assert cloned.json()["ok"] is True, cloned.text
    assert (base / "demo-f" / "a.txt").read_text() == "feature\n"

    missing = {"repo_url": git_server.url("nothing"), "project_name": "nothing"}
    failed = await cloner.post("/clone", json=missing, headers=AUTH)
    assert failed.status_code == 200, "git's failure is an answer, as the reference's"
    assert failed.json()["ok"] is False
    assert failed.json()["detail"].startswith("Clone failed (rc=")
    assert failed.json()["stderr"]

    (base / "plain").mkdir()
    not_git = await cloner.post(
        "/clone", json={"repo_url": url, "project_name": "plain"}, headers=AUTH
    )
    assert not_git.status_code == 409


async def test_a_clone_cannot_plant_files_in_a_checkout(
    cloner: httpx.AsyncClient, base: Path, git_server: GitServer
) -> None:
    """`p1/.claude` in the managed checkout p1 would bring its own settings (a SessionStart
    hook) into every Claude session run there."""
    url = git_server.repository("p1", {"README.md": "p1\n"})
    cloned = await cloner.post("/clone", json={"repo_url": url, "project_name": "p1"}, headers=AUTH)
    assert cloned.json()["ok"] is True, cloned.text
    planted = git_server.repository("planted", {"settings.json": '{"hooks": {}}'})
    for target in ("p1/.claude", str(base / "p1" / ".claude"), "p1/sub"):
        body = {"repo_url": planted, "project_name": "planted", "target_path": target}
        refused = await cloner.post("/clone", json=body, headers=AUTH)
        assert refused.status_code == 400, target
        assert "directly in" in refused.json()["detail"]
    assert sorted(path.name for path in (base / "p1").iterdir()) == [".git", "README.md"]


async def test_no_clone_inside_a_checkout_holding_the_base(
    tmp_path: Path, git_server: GitServer
) -> None:
    url = git_server.repository("demo", {"README.md": "x\n"})
    home = tmp_path / "home"
    git("init", "--quiet", str(home))
    settings = WorkerSettings(
        name="n1",
        agent_port=free_port(),
        agent_key=KEY,
        allow_clone=True,
        repos_base=home / "projects",
    )
    async with agent(settings) as http:
        body = {"repo_url": url, "project_name": "demo"}
        refused = await http.post("/clone", json=body, headers=AUTH)
    assert refused.status_code == 400
    assert f"inside the git checkout {home.resolve()}" in refused.json()["detail"]
    assert not (home / "projects").exists()


HOOKS = {
    "target-turned-link": 'mv "$here" "$here.moved" && ln -s "$elsewhere" "$here"',
    "checkout-above": 'mkdir "$here/../.git"',
    "base-turned-link": 'cd / && mv "$base" "$base.moved" && ln -s "$elsewhere" "$base"',
}
"""What a post-checkout hook does to the fresh clone (`$here`), as a local race could."""


@pytest.mark.parametrize("change", list(HOOKS))
async def test_a_target_changed_during_the_clone_is_refused_and_removed(
    cloner: httpx.AsyncClient,
    base: Path,
    git_server: GitServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
) -> None:
    """The node's global git configuration runs a hook while the clone checks out. What the
    target became is refused; what lies at it is removed, a link never followed; what lies
    beyond a link above it is left alone."""
    url = git_server.repository("demo", {"README.md": "x\n"})
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "demo").mkdir(parents=True)
    (elsewhere / "demo" / "keep").write_text("not ours\n")
    hook = tmp_path / "hooks" / "post-checkout"
    hook.parent.mkdir()
    hook.write_text(
        f'#!/bin/sh\nhere=$(pwd -P) elsewhere="{elsewhere}" base="{base}"\n{HOOKS[change]}\n'
    )
    hook.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hook.parent}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    body = {"repo_url": url, "project_name": "demo"}
    refused = await cloner.post("/clone", json=body, headers=AUTH)
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    if change == "base-turned-link":
        assert detail.endswith(f"now leads to {elsewhere / 'demo'}: refused")
    else:
        assert detail.endswith("changed during the clone: refused and removed")
        assert not os.path.lexists(base / "demo")
    assert [path.name for path in elsewhere.rglob("*")] == ["demo", "keep"]


@pytest.mark.parametrize(
    "name",
    [
        *("main", "feature/x", "release-1.2", "v1.0", "a.b/c_d", "pull/1/head", "x" * 255),
        *("HEAD", "FETCH_HEAD", "refs/pull/1/head", "main@{1}", "main~1", "a:b", "-x", "a..b"),
        *(".a", "a/.b", "a.lock", "a/", "a//b", "a.", "a b", "a*b", "a[b", "a\\b", "@"),
    ],
)
def test_every_plain_branch_is_one_git_takes(name: str) -> None:
    """The validator is git's rule for a branch name (`git check-ref-format --branch`) or
    stricter, never looser."""
    checked = subprocess.run(
        ["git", "check-ref-format", "--branch", name], capture_output=True, check=False
    )
    if is_plain_branch(name):
        assert checked.returncode == 0, name
