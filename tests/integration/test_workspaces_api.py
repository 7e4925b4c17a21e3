"""Workspaces on the runtime's side, on both databases: a create names a managed project (its URL
kept with the task, bad values 400s naming the field), the task goes only to a worker that serves
workspaces and never while another task writes its branch, a complete's `workspace` and `patch`
become the result's and an artifact of type `patch`, and the branch's history is what a worker
rebuilds it from (its own task's only)."""

from typing import Any

import httpx
import pytest

from tests.support.api import API, claim, create_task, register_worker, success

BASE = "a" * 40
HEAD = "b" * 40
PATCH = "From bbbb Mon Sep 17 00:00:00 2001\nSubject: [PATCH] add hello\n\n---\n"


@pytest.fixture
async def project(client: httpx.AsyncClient) -> dict[str, Any]:
    body = {"name": "demo", "repo_url": "https://git.example/demo.git"}
    response = await client.post(f"{API}/projects", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def workspace_worker(client: httpx.AsyncClient, name: str, slots: int = 1) -> None:
    caps = {"claude_cli": True, "max_concurrency": slots, "workspaces": True}
    await register_worker(client, name, capabilities=caps)


def workspace_result(**fields: Any) -> dict[str, Any]:
    return {
        "base": BASE,
        "head": HEAD,
        "branch": "bloom/ctx-1",
        "pushed": True,
        "push_error": None,
        "files_changed": 1,
        "insertions": 1,
        "deletions": 0,
    } | fields


async def test_a_task_keeps_its_workspace_with_the_projects_url(
    client: httpx.AsyncClient, project: dict[str, Any]
) -> None:
    task = await create_task(client, workspace={"repo": "demo"})
    assert task["workspace"] == {
        "repo": "demo",
        "repo_url": "https://git.example/demo.git",
        "ref": None,
        "branch": "bloom/ctx-1",
        "push": True,
    }
    named = await create_task(
        client,
        context_id="team:alpha/1",
        workspace={"repo": "demo", "ref": "v1.2", "branch": "feature/x", "push": False},
    )
    assert (named["workspace"]["branch"], named["workspace"]["ref"]) == ("feature/x", "v1.2")
    assert named["workspace"]["push"] is False
    odd = await create_task(client, context_id="team:alpha/1", workspace={"repo": "demo"})
    assert odd["workspace"]["branch"] == "bloom/team-alpha-1"
    plain = await create_task(client)
    assert plain["workspace"] is None
    read = (await client.get(f"{API}/llm-tasks/{task['id']}")).json()
    assert read["workspace"] == task["workspace"]


@pytest.mark.parametrize(
    ("workspace", "field_text"),
    [
        ({"repo": "nope"}, 'no managed project is named \\"nope\\"'),
        ({"repo": "../etc"}, "String should match pattern"),
        ({"repo": "demo", "branch": "refs/heads/main"}, "plain branch name"),
        ({"repo": "demo", "branch": "a..b"}, "plain branch name"),
        ({"repo": "demo", "ref": "HEAD~1"}, "commit id"),
        ({"repo": "demo", "push": "yes"}, "valid boolean"),
        ({"repo": "demo", "path": "/"}, "Unrecognized key"),
    ],
)
async def test_a_bad_workspace_is_a_400_naming_it(
    client: httpx.AsyncClient, project: dict[str, Any], workspace: dict[str, Any], field_text: str
) -> None:
    body = {"context_id": "c", "agent_slug": "a", "prompt": "p", "workspace": workspace}
    response = await client.post(f"{API}/llm-tasks", json=body)
    assert response.status_code == 400, response.text
    assert "workspace" in response.text
    assert field_text in response.text
    batch = await client.post(f"{API}/llm-tasks/batch", json={"tasks": [body]})
    assert batch.status_code == 400, batch.text
    assert (await client.get(f"{API}/llm-tasks")).json() == []


async def test_only_a_worker_serving_workspaces_gets_them(
    client: httpx.AsyncClient, project: dict[str, Any]
) -> None:
    await register_worker(client, "plain")
    task = await create_task(client, workspace={"repo": "demo"})
    assert await claim(client, "plain") is None
    await workspace_worker(client, "gitty")
    grant = await claim(client, "gitty")
    assert grant is not None
    assert grant["task"]["id"] == task["id"]
    assert grant["task"]["workspace"]["repo_url"] == "https://git.example/demo.git"


async def test_one_branch_is_written_by_one_task_at_a_time(
    client: httpx.AsyncClient, project: dict[str, Any]
) -> None:
    """Two contexts naming one branch: the second waits, queued, until the first ends; another
    branch of the same repository does not wait."""
    await workspace_worker(client, "w1")
    await workspace_worker(client, "w2", slots=2)
    first = await create_task(client, context_id="a", workspace={"repo": "demo", "branch": "x"})
    second = await create_task(client, context_id="b", workspace={"repo": "demo", "branch": "x"})
    other = await create_task(client, context_id="c", workspace={"repo": "demo", "branch": "y"})
    grant = await claim(client, "w1")
    assert grant is not None
    assert grant["task"]["id"] == first["id"]
    taken = await claim(client, "w2")
    assert taken is not None
    assert taken["task"]["id"] == other["id"]
    assert await claim(client, "w2") is None
    waiting = (await client.get(f"{API}/llm-tasks/{second['id']}")).json()
    assert waiting["status"] == "queued"
    assert waiting["waiting_for"] == {
        "reason": "branch_busy",
        "task_id": first["id"],
        "repo": "demo",
        "branch": "x",
    }
    page = await client.get(f"/tasks/{second['id']}")
    assert "is writing the branch" in page.text
    assert first["id"] in page.text
    done = await client.post(
        f"{API}/llm-tasks/{first['id']}/complete",
        json=success(lease_id=grant["lease"]["id"], worker_id="w1"),
    )
    assert done.status_code == 200, done.text
    assert "waiting_for" not in (await client.get(f"{API}/llm-tasks/{second['id']}")).json()
    after = await claim(client, "w2")
    assert after is not None
    assert after["task"]["id"] == second["id"]


async def complete_with_change(
    client: httpx.AsyncClient, grant: dict[str, Any], **workspace: Any
) -> httpx.Response:
    body = success(
        lease_id=grant["lease"]["id"],
        worker_id=grant["lease"]["worker_id"],
        workspace=workspace_result(**workspace),
        patch=PATCH,
    )
    return await client.post(f"{API}/llm-tasks/{grant['task']['id']}/complete", json=body)


async def test_a_complete_keeps_the_change_as_a_patch_artifact_and_the_result(
    client: httpx.AsyncClient, project: dict[str, Any]
) -> None:
    await workspace_worker(client, "w1")
    task = await create_task(client, workspace={"repo": "demo"})
    grant = await claim(client, "w1")
    assert grant is not None
    done = await complete_with_change(client, grant)
    assert done.status_code == 200, done.text
    workspace = done.json()["result"]["workspace"]
    assert (workspace["base"], workspace["head"], workspace["pushed"]) == (BASE, HEAD, True)
    artifacts = (await client.get(f"{API}/artifacts", params={"task_id": task["id"]})).json()
    patch = next(a for a in artifacts if a["type"] == "patch")
    assert workspace["patch_artifact_id"] == patch["id"]
    content = await client.get(f"{API}/artifacts/{patch['id']}/content")
    assert content.text == PATCH
    assert any(a["type"] == "LLM_RESULT" for a in artifacts)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"base": "abc"}, "workspace.base"),
        ({"head": "G" * 40}, "workspace.head"),
        ({"branch": "-x"}, "workspace.branch"),
        ({"files_changed": -1}, "workspace.files_changed"),
        ({"pushed": "no"}, "workspace.pushed"),
    ],
)
async def test_a_bad_workspace_result_is_a_400_and_changes_nothing(
    client: httpx.AsyncClient, project: dict[str, Any], change: dict[str, Any], named: str
) -> None:
    await workspace_worker(client, "w1")
    task = await create_task(client, workspace={"repo": "demo"})
    grant = await claim(client, "w1")
    assert grant is not None
    refused = await complete_with_change(client, grant, **change)
    assert refused.status_code == 400, refused.text
    assert named in refused.text
    assert (await client.get(f"{API}/llm-tasks/{task['id']}")).json()["status"] == "leased"


async def test_the_branch_history_is_its_tasks_changes_in_order(
    client: httpx.AsyncClient, project: dict[str, Any]
) -> None:
    await workspace_worker(client, "w1")
    first = await create_task(client, workspace={"repo": "demo"})
    grant = await claim(client, "w1")
    assert grant is not None
    empty = (await client.get(f"{API}/llm-tasks/{first['id']}/workspace")).json()
    assert (empty["head"], empty["steps"]) == (None, [])
    assert (await complete_with_change(client, grant)).status_code == 200
    second = await create_task(client, workspace={"repo": "demo"})
    grant = await claim(client, "w1")
    assert grant is not None
    assert grant["task"]["id"] == second["id"]
    unchanged = await complete_with_change(client, grant, base=HEAD, head=HEAD, files_changed=0)
    assert unchanged.status_code == 200
    history = (
        await client.get(f"{API}/llm-tasks/{second['id']}/workspace", params={"patches": "true"})
    ).json()
    assert history["head"] == HEAD
    assert [(s["task_id"], s["base"], s["head"]) for s in history["steps"]] == [
        (first["id"], BASE, HEAD)
    ]
    assert history["steps"][0]["patch"] == PATCH
    plain = await create_task(client)
    missing = await client.get(f"{API}/llm-tasks/{plain['id']}/workspace")
    assert missing.status_code == 404
