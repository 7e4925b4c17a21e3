"""The worker's process control on its agent surface (served on a real port): refused unless
opted in with a key; restart and uninstall drain the worker (then start again, or not);
self-update fast-forwards a real checkout over HTTP and restarts only when every step worked.
And who may scrape the worker's metrics there."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from bloom.web.settings import SettingsError
from bloom.worker.agent_http import AgentSurface, serving
from bloom.worker.settings import WorkerSettings
from tests.support.agent import runs_nothing
from tests.support.git import GitServer, git
from tests.support.net import free_port

KEY = "agent-key-for-process-control"
AUTH = {"X-MEMBRIDGE-AGENT": KEY}


@asynccontextmanager
async def agent(settings: WorkerSettings, stops: list[bool]) -> AsyncIterator[httpx.AsyncClient]:
    """The agent surface on its port, recording the worker's stops (True: start again)."""
    async with serving(AgentSurface(settings, runs_nothing, list, None, stops.append)):
        url = f"http://127.0.0.1:{settings.agent_port}"
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http


def allowed(**settings: object) -> WorkerSettings:
    values: dict[str, object] = {
        "name": "n1",
        "agent_port": free_port(),
        "agent_key": KEY,
        "allow_process_control": True,
    }
    return WorkerSettings(**(values | settings))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("opted_in", "key", "said"),
    [(False, KEY, "--allow-process-control"), (True, "", "needs an agent key")],
    ids=["not-opted-in", "no-key"],
)
async def test_process_control_is_refused_unless_opted_in_with_a_key(
    opted_in: bool, key: str, said: str
) -> None:
    stops: list[bool] = []
    settings = allowed(allow_process_control=opted_in, agent_key=key)
    async with agent(settings, stops) as http:
        for path in ("/restart", "/self-update", "/uninstall"):
            refused = await http.post(path, json={}, headers=AUTH)
            assert refused.status_code == 403, path
            assert said in refused.json()["detail"]
        assert (await http.get("/health")).json()["capabilities"]["process_control"] is False
    assert stops == []


async def test_restart_and_uninstall_drain_the_worker() -> None:
    stops: list[bool] = []
    async with agent(allowed(), stops) as http:
        assert (await http.post("/restart")).status_code == 401  # the key, always
        health = (await http.get("/health")).json()
        assert health["capabilities"]["process_control"] is True
        assert health["pid"] > 0
        assert health["started_at"] > 0
        restarted = (await http.post("/restart", headers=AUTH)).json()
        assert (restarted["ok"], restarted["method"], restarted["service"]) == (
            True,
            "exec",
            "bloom-worker",
        )
        assert restarted["init_system"] in ("systemd", "openrc", "none")
        gone = (await http.post("/uninstall", headers=AUTH)).json()
        assert (gone["ok"], gone["node_id"]) == (True, "n1")
        assert "disable" in gone["detail"]
    assert stops == [True, False]


async def test_self_update_fast_forwards_the_checkout_then_restarts(
    tmp_path: Path, git_server: GitServer
) -> None:
    url = git_server.repository("bloom", {"VERSION": "1\n"})
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", url, str(checkout))
    old = git("rev-parse", "HEAD", cwd=checkout)
    git_server.commit("bloom", {"VERSION": "2\n"})
    stops: list[bool] = []
    async with agent(allowed(checkout=checkout), stops) as http:
        updated = (await http.post("/self-update", json={"branch": "main"}, headers=AUTH)).json()
        assert updated["ok"] is True, updated
        assert updated["old_commit"] == old
        assert updated["new_commit"] != old
        assert [step["step"] for step in updated["steps"]] == ["git pull"]  # no uv.lock here
        assert (checkout / "VERSION").read_text() == "2\n"
        assert stops == [True]

        # diverged: the fast-forward fails, nothing restarts
        git("commit", "--quiet", "--allow-empty", "-m", "local", cwd=checkout)
        git_server.commit("bloom", {"VERSION": "3\n"})
        failed = (await http.post("/self-update", headers=AUTH)).json()
        assert (failed["ok"], failed["detail"]) == (False, "git pull failed")
        assert failed["steps"][0]["returncode"] != 0
        for bad in ({"branch": "--upload-pack=x"}, ["x"]):
            refused = (await http.post("/self-update", json=bad, headers=AUTH)).json()
            assert refused["ok"] is False
    assert stops == [True]


async def test_self_update_follows_only_plain_branches_the_node_follows(
    tmp_path: Path, git_server: GitServer
) -> None:
    """On a forge anyone may open a pull request (`refs/pull/1/head`) or push a branch: the
    worker follows the branch it was installed from (its checkout's), and those an admin lists
    in BLOOM_WORKER_UPDATE_BRANCHES; a plain name never reaches anything but a branch."""
    url = git_server.repository("bloom", {"VERSION": "1\n"})
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", url, str(checkout))
    git_server.commit("bloom", {"VERSION": "pull request\n"}, branch="refs/pull/1/head")
    git_server.commit("bloom", {"VERSION": "release\n"}, branch="release")
    stops: list[bool] = []
    async with agent(allowed(checkout=checkout), stops) as http:
        for branch in ("refs/pull/1/head", "FETCH_HEAD", "HEAD", "main@{1}", "main~1", "a:b"):
            refused = await http.post("/self-update", json={"branch": branch}, headers=AUTH)
            assert refused.status_code == 400, branch
            assert "not a plain branch name" in refused.json()["detail"]
        for branch in ("release", "pull/1/head"):
            refused = await http.post("/self-update", json={"branch": branch}, headers=AUTH)
            assert refused.status_code == 403, branch
            detail = refused.json()["detail"]
            assert detail.startswith(f"branch '{branch}' is not followed here")
            assert "installed from (main)" in detail
            assert "BLOOM_WORKER_UPDATE_BRANCHES (none)" in detail
    assert (checkout / "VERSION").read_text() == "1\n"
    admin_allowed = allowed(checkout=checkout, update_branches=["pull/1/head", "release"])
    async with agent(admin_allowed, stops) as http:
        answer = await http.post("/self-update", json={"branch": "pull/1/head"}, headers=AUTH)
        assert (answer.json()["ok"], answer.json()["detail"]) == (False, "git pull failed")
        assert (checkout / "VERSION").read_text() == "1\n"
        assert stops == []
        answer = await http.post("/self-update", json={"branch": "release"}, headers=AUTH)
        assert answer.json()["ok"] is True, answer.text
    assert (checkout / "VERSION").read_text() == "release\n"
    assert stops == [True]


async def test_self_update_outside_a_checkout_is_a_failure(tmp_path: Path) -> None:
    stops: list[bool] = []
    async with agent(allowed(checkout=tmp_path), stops) as http:
        answer = (await http.post("/self-update", headers=AUTH)).json()
    assert (answer["ok"], answer["detail"]) == (False, f"{tmp_path} is not a git checkout")
    assert stops == []


async def test_the_surface_is_not_served_beyond_loopback_without_a_key() -> None:
    """`bloom worker run` refuses first (exit 2); serving it from code refuses too."""
    with pytest.raises(SettingsError, match=r"refusing to serve the agent surface on 0\.0\.0\.0 "):
        async with agent(allowed(agent_key="", agent_host="0.0.0.0"), []):
            pass


async def test_the_workers_metrics_need_the_agent_key_unless_public() -> None:
    async with agent(allowed(), []) as http:
        assert (await http.get("/metrics")).status_code == 401
        scraped = await http.get("/metrics", headers=AUTH)
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        assert "bloom_worker_slots 1.0" in scraped.text
    async with agent(allowed(metrics_public=True), []) as http:
        assert (await http.get("/metrics")).status_code == 200
