"""Task graphs meeting artifacts and workspaces, on both databases (docs/graphs.md): the
artifacts of the dependencies a task names in `dependency_artifacts` passed on at its grant
(bounded, cut and said, by reference when kept outside the database), and a new branch of a
workspace task that depends on a workspace task of its repository starting at that task's head
(the history its worker reads after the grant), a fan-in of branches refused at create."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.graph import MAX_ANSWER_CHARS
from tests.integration.test_artifact_content import app_client
from tests.support.api import API, claim, register_worker, success
from tests.support.clock import FakeClock
from tests.support.databases import make_settings

BASE = "a" * 40
HEAD = "b" * 40
NEXT = "c" * 40
PATCH = "From bbbb Mon Sep 17 00:00:00 2001\nSubject: [PATCH] add hello\n\n+hello\n"


async def add_project(http: httpx.AsyncClient) -> None:
    body = {"name": "demo", "repo_url": "https://git.example/demo.git"}
    response = await http.post(f"{API}/projects", json=body)
    assert response.status_code == 201, response.text


async def workspace_worker(http: httpx.AsyncClient, name: str) -> None:
    caps = {"claude_cli": True, "max_concurrency": 1, "workspaces": True}
    await register_worker(http, name, capabilities=caps)


def task(prompt: str, ref: str, *after: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"context_id": f"ctx-{ref}", "agent_slug": "a", "prompt": prompt}
    return body | {"ref": ref} | ({"depends_on": list(after)} if after else {}) | fields


async def batch(http: httpx.AsyncClient, *tasks: dict[str, Any]) -> list[dict[str, Any]]:
    response = await http.post(f"{API}/llm-tasks/batch", json={"tasks": list(tasks)})
    assert response.status_code == 201, response.text
    return list(response.json()["tasks"])


async def refusal(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, str]:
    """The 400's one field error: {field, message}."""
    response = await http.post(f"{API}{path}", json=body)
    assert response.status_code == 400, response.text
    [(field, [message])] = response.json()["error"]["fieldErrors"].items()
    return {"field": field, "message": message}


async def grant_of(http: httpx.AsyncClient, worker: str, task_id: str) -> dict[str, Any]:
    grant = await claim(http, worker)
    assert grant is not None, "nothing to claim"
    assert grant["task"]["id"] == task_id
    return grant


def change(base: str, head: str, branch: str) -> dict[str, Any]:
    return {
        "base": base,
        "head": head,
        "branch": branch,
        "pushed": True,
        "push_error": None,
        "files_changed": 1,
        "insertions": 1,
        "deletions": 0,
    }


async def complete(
    http: httpx.AsyncClient, grant: dict[str, Any], output: str, **fields: Any
) -> dict[str, Any]:
    body = success(output, lease_id=grant["lease"]["id"]) | fields
    response = await http.post(f"{API}/llm-tasks/{grant['task']['id']}/complete", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def history(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    response = await http.get(f"{API}/llm-tasks/{task_id}/workspace", params={"patches": "true"})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_the_artifacts_of_the_dependencies_named_are_passed_on_bounded(
    client: httpx.AsyncClient,
) -> None:
    await add_project(client)
    await workspace_worker(client, "w1")
    long_patch = PATCH + "+" + "x" * (MAX_ANSWER_CHARS + 10) + "\n"
    build, notes, review = await batch(
        client,
        task("build it", "build", workspace={"repo": "demo"}),
        task("take notes", "notes"),
        task("review", "review", "build", "notes", dependency_artifacts=["build"]),
    )
    done = await complete(
        client,
        await grant_of(client, "w1", build["id"]),
        "built",
        workspace=change(BASE, HEAD, "bloom/ctx-build"),
        patch=long_patch,
    )
    patch_id = done["result"]["workspace"]["patch_artifact_id"]
    output_id = done["artifact"]["id"]
    await complete(client, await grant_of(client, "w1", notes["id"]), "noted")

    prompt = (await grant_of(client, "w1", review["id"]))["task"]["prompt"]
    build_block, notes_block = prompt.split("</dependency>")[:2]
    assert "built" in build_block
    size = len(long_patch.encode())
    assert f'<artifact id="{output_id}" type="LLM_RESULT" bytes="5">' in build_block
    assert "(its content is the answer above)" in build_block
    assert f'<artifact id="{patch_id}" type="patch" bytes="{size}">\n{PATCH}' in build_block
    # cut at the bound (only one character past it is read), said, and where the whole is read
    assert long_patch[:MAX_ANSWER_CHARS] + "\n[... at least 1 more characters cut" in build_block
    assert (
        "more characters cut; the whole: GET "
        f"/api/runtime/artifacts/{patch_id}/content]\n</artifact>"
    ) in build_block
    assert "<artifact" not in notes_block  # not asked for
    assert "noted" in notes_block
    assert prompt.endswith("review")
    stored = (await client.get(f"{API}/llm-tasks/{review['id']}")).json()
    assert stored["prompt"] == "review"


@pytest.fixture
async def files_client(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(database_url, tmp_path, artifact_store="fs")
    async for http in app_client(settings, FakeClock()):
        yield http


async def test_artifacts_kept_outside_the_database_are_passed_by_reference(
    files_client: httpx.AsyncClient,
) -> None:
    http = files_client
    await add_project(http)
    await workspace_worker(http, "w1")
    build, review = await batch(
        http,
        task("build it", "build", workspace={"repo": "demo"}),
        task("review", "review", "build", dependency_artifacts=["build"]),
    )
    done = await complete(
        http,
        await grant_of(http, "w1", build["id"]),
        "built",
        workspace=change(BASE, HEAD, "bloom/ctx-build"),
        patch=PATCH,
    )
    patch_id = done["result"]["workspace"]["patch_artifact_id"]
    prompt = (await grant_of(http, "w1", review["id"]))["task"]["prompt"]
    assert (
        f'<artifact id="{patch_id}" type="patch" bytes="{len(PATCH)}">\n'
        f"Not included (kept outside the database): GET /api/runtime/artifacts/{patch_id}/content"
    ) in prompt
    assert "+hello" not in prompt


async def test_dependency_artifacts_must_name_tasks_of_depends_on(
    client: httpx.AsyncClient,
) -> None:
    first = await batch(client, task("one", "one"))
    one = first[0]["id"]
    single = {"context_id": "c", "agent_slug": "a", "prompt": "p"}
    error = await refusal(client, "/llm-tasks", single | {"dependency_artifacts": [one]})
    assert error["field"] == "dependency_artifacts"
    assert f'"{one}" is not named in depends_on' in error["message"]
    twice = single | {"depends_on": [one], "dependency_artifacts": [one, one]}
    error = await refusal(client, "/llm-tasks", twice)
    assert (error["field"], error["message"]) == ("dependency_artifacts", f'"{one}" is named twice')
    in_batch = {"tasks": [task("a", "a"), task("b", "b", "a", dependency_artifacts=["c"])]}
    error = await refusal(client, "/llm-tasks/batch", in_batch)
    assert error["field"] == "tasks.1.dependency_artifacts"
    assert len((await client.get(f"{API}/llm-tasks")).json()) == 1


async def test_a_new_branch_starts_at_its_workspace_dependency_s_head(
    client: httpx.AsyncClient,
) -> None:
    await add_project(client)
    await workspace_worker(client, "w1")
    a, d = await batch(
        client,
        task("write a", "a", workspace={"repo": "demo", "branch": "feature/a"}),
        task("write d", "d", "a", workspace={"repo": "demo", "branch": "feature/d"}),
    )
    before = await history(client, d["id"])
    assert (before["head"], before["start"], before["steps"]) == (None, None, [])

    done = await complete(
        client,
        await grant_of(client, "w1", a["id"]),
        "a done",
        workspace=change(BASE, HEAD, "feature/a"),
        patch=PATCH,
    )
    await grant_of(client, "w1", d["id"])
    # what d's worker reads once granted: it starts at a's head, rebuildable from a's patch
    granted = await history(client, d["id"])
    assert granted["head"] == HEAD
    assert granted["start"] == {"task_id": a["id"], "branch": "feature/a", "head": HEAD}
    [step] = granted["steps"]
    assert (step["task_id"], step["base"], step["head"]) == (a["id"], BASE, HEAD)
    assert step["patch"] == PATCH
    assert step["patch_artifact_id"] == done["result"]["workspace"]["patch_artifact_id"]
    assert granted["workspace"]["branch"] == "feature/d"


async def test_a_branch_started_at_a_dependency_keeps_its_steps_and_continues_its_own(
    client: httpx.AsyncClient,
) -> None:
    await add_project(client)
    await workspace_worker(client, "w1")
    a, d = await batch(
        client,
        task("write a", "a", workspace={"repo": "demo", "branch": "feature/a"}),
        task("write d", "d", "a", workspace={"repo": "demo", "branch": "feature/d"}),
    )
    a_grant = await grant_of(client, "w1", a["id"])
    await complete(client, a_grant, "a", workspace=change(BASE, HEAD, "feature/a"), patch=PATCH)
    d_grant = await grant_of(client, "w1", d["id"])
    await complete(client, d_grant, "d", workspace=change(HEAD, NEXT, "feature/d"), patch=PATCH)
    # a later writer of feature/a does not move where d started
    later = await batch(
        client, task("more a", "a", workspace={"repo": "demo", "branch": "feature/a"})
    )
    later_grant = await grant_of(client, "w1", later[0]["id"])
    await complete(
        client, later_grant, "a2", workspace=change(HEAD, "d" * 40, "feature/a"), patch=PATCH
    )
    # the next task of d's branch (no dependency) continues it; its history holds a's step first
    e = (
        await batch(client, task("write e", "d", workspace={"repo": "demo", "branch": "feature/d"}))
    )[0]
    await grant_of(client, "w1", e["id"])
    grown = await history(client, e["id"])
    assert grown["head"] == NEXT
    assert grown["start"] is None
    assert [(s["task_id"], s["base"], s["head"]) for s in grown["steps"]] == [
        (a["id"], BASE, HEAD),
        (d["id"], HEAD, NEXT),
    ]


async def test_a_dependency_on_the_same_branch_continues_it_and_other_repos_do_not_count(
    client: httpx.AsyncClient,
) -> None:
    await add_project(client)
    other = {"name": "other", "repo_url": "https://git.example/other.git"}
    assert (await client.post(f"{API}/projects", json=other)).status_code == 201
    await workspace_worker(client, "w1")
    a, o, d = await batch(
        client,
        task("write a", "a", workspace={"repo": "demo", "branch": "x"}),
        task("write o", "o", workspace={"repo": "other", "branch": "y"}),
        task("write d", "d", "a", "o", workspace={"repo": "demo", "branch": "x"}),
    )
    await complete(
        client, await grant_of(client, "w1", a["id"]), "a", workspace=change(BASE, HEAD, "x")
    )
    await complete(
        client, await grant_of(client, "w1", o["id"]), "o", workspace=change(NEXT, NEXT, "y")
    )
    await grant_of(client, "w1", d["id"])
    same = await history(client, d["id"])
    assert (same["head"], same["start"]) == (HEAD, None)
    assert [s["task_id"] for s in same["steps"]] == [a["id"]]


async def test_a_fan_in_of_branches_and_a_ref_with_a_branch_dependency_are_refused(
    client: httpx.AsyncClient,
) -> None:
    await add_project(client)
    x = {"repo": "demo", "branch": "x"}
    error = await refusal(
        client,
        "/llm-tasks/batch",
        {
            "tasks": [
                task("on x", "a", workspace=x),
                task("on y", "b", workspace={"repo": "demo", "branch": "y"}),
                task("both", "c", "a", "b", workspace={"repo": "demo", "branch": "z"}),
            ]
        },
    )
    assert error["field"] == "tasks.2.depends_on"
    assert "write 2 branches (x, y): merging branches is not built" in error["message"]
    # existing tasks by id, and one of them on the task's own branch
    on_x, on_y = await batch(
        client, task("on x", "a", workspace=x), task("on y", "b", workspace={"repo": "demo"})
    )
    body = {"context_id": "c", "agent_slug": "a", "prompt": "p", "workspace": x}
    error = await refusal(client, "/llm-tasks", body | {"depends_on": [on_x["id"], on_y["id"]]})
    assert error["field"] == "depends_on"
    assert "(bloom/ctx-b, x)" in error["message"]
    with_ref = body | {"depends_on": [on_y["id"]], "workspace": x | {"ref": "main"}}
    error = await refusal(client, "/llm-tasks", with_ref)
    assert error["field"] == "workspace"
    assert "ref: it starts from its dependency's branch head" in error["message"]
    # the same branch twice, or a plain task after both, is fine
    fine = await batch(
        client,
        task("after x", "d", workspace=x, depends_on=[on_x["id"]]),
        task("review", "e", on_x["id"], on_y["id"]),
    )
    assert [t["status"] for t in fine] == ["blocked", "blocked"]
    assert len((await client.get(f"{API}/llm-tasks")).json()) == 4
