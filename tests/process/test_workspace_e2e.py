"""Workspaces end to end, on both databases: real git (a repository served over smart HTTP by
`git http-backend`), the runtime, workers running the real Claude CLI against the echo model,
which scripts the shell commands that change files.

A task's change comes back as a commit on its branch, pushed, and as a patch that reproduces it
from its base; a follow-up in the same context adds one commit on the same branch; a run that
changes nothing commits nothing; a worker killed with -9 mid-run loses nothing: the retry, on
another worker that never had the repository, continues from the pushed branch, and no commit is
made twice. With `push: false`, a node that lacks the branch rebuilds it from the patches. A task
after a workspace task of another branch starts at that task's head (rebuilt where the node lacks
it), and a task after it with its artifacts gets its patch in the prompt (docs/graphs.md)."""

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.process.test_mcp import bloom_mcp, structured
from tests.process.test_worker_e2e import working_in
from tests.support.git_http import GitServer, git
from tests.support.stack import Stack, wait_for

WORKSPACE_WORKER = {"BLOOM_WORKER_ALLOW_CLONE": "true"}


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[GitServer]:
    with GitServer(tmp_path / "served") as server:
        yield server


@pytest.fixture
def demo(stack: Stack, origin: GitServer, tmp_path: Path) -> str:
    """The managed project `demo`, a repository with a README on `main`."""
    url = origin.create("demo", {"README.md": "# demo\n"}, tmp_path / "seed")
    made = stack.http.post("/projects", json={"name": "demo", "repo_url": url})
    assert made.status_code == 201, made.text
    return url


def shell(command: str) -> str:
    return f'[[tool Bash {{"command": "{command}"}}]]'


def done(stack: Stack, task_id: str, timeout: float = 90) -> dict[str, Any]:
    task = stack.wait(task_id, timeout=timeout)
    assert task["status"] == "completed", (task, stack.logs()[-4000:])
    return task


def history(stack: Stack, task_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = stack.http.get(f"/llm-tasks/{task_id}/workspace").json()
    return answer


def patch_of(stack: Stack, task_id: str) -> str | None:
    artifacts = stack.http.get("/artifacts", params={"task_id": task_id}).json()
    patches = [a for a in artifacts if a["type"] == "patch"]
    if not patches:
        return None
    return stack.http.get(f"/artifacts/{patches[0]['id']}/content").text


def clone(url: str, where: Path) -> Path:
    git("clone", "--quiet", url, str(where))
    return where


def bloom(stack: Stack, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A `bloom` command as a person runs it, against the stack's runtime."""
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", *args, "--url", stack.runtime.url],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def through_mcp(stack: Stack, task_id: str) -> tuple[dict[str, Any], str, str]:
    """get_task's view, the patch resource and the task's answer resource, as a session reads
    them through `bloom mcp`."""
    async with bloom_mcp(stack.runtime.url, "") as client:
        view = structured(await client.call_tool("get_task", {"task_id": task_id}))
        patch = await client.read_resource(view["change"]["patch_uri"])
        answer = await client.read_resource(f"bloom://tasks/{task_id}/result")
    return view, getattr(patch.contents[0], "text", ""), getattr(answer.contents[0], "text", "")


def trailers(checkout: Path, revisions: str) -> list[str]:
    out = git("log", "--format=%(trailers:key=Bloom-Task,valueonly)", revisions, cwd=checkout)
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_a_branch_grows_task_by_task_and_survives_a_killed_worker(
    stack: Stack, origin: GitServer, demo: str, tmp_path: Path
) -> None:
    first_worker = stack.add_worker("w1", **WORKSPACE_WORKER)
    context = "ctx-ws"
    workspace = {"repo": "demo"}
    main = origin.head("demo", "main")

    first = stack.submit(
        f"add a hello file {shell('echo hi > hello.txt')}", context_id=context, workspace=workspace
    )
    done(stack, first)
    [step] = history(stack, first)["steps"]
    assert (step["task_id"], step["base"], step["pushed"]) == (first, main, True)
    assert origin.head("demo", "bloom/ctx-ws") == step["head"]

    # the patch, applied to its base, gives the branch's tree
    checkout = clone(demo, tmp_path / "check")
    git("checkout", "--quiet", "-b", "review", step["base"], cwd=checkout)
    patch = patch_of(stack, first)
    assert patch is not None
    assert "Bloom-Task: " + first in patch
    subprocess.run(
        ["git", "am", "--quiet"],
        input=patch,
        text=True,
        cwd=checkout,
        check=True,
        capture_output=True,
        env={"GIT_COMMITTER_NAME": "r", "GIT_COMMITTER_EMAIL": "r@x", "PATH": "/usr/bin:/bin"},
    )
    git("fetch", "--quiet", "origin", cwd=checkout)
    assert git("rev-parse", "HEAD^{tree}", cwd=checkout) == git(
        "rev-parse", f"{step['head']}^{{tree}}", cwd=checkout
    )
    assert (checkout / "hello.txt").read_text() == "hi\n"

    # MCP's get_task reports the change; its patch is a resource
    view, patch_read, answer_read = asyncio.run(through_mcp(stack, first))
    assert view["workspace"] == {"repo": "demo", "branch": "bloom/ctx-ws"}
    assert view["change"]["head"] == step["head"]
    assert (view["change"]["files_changed"], view["change"]["insertions"]) == (1, 1)
    assert patch_read == patch
    assert answer_read != patch

    # `bloom task diff` prints it; `bloom task apply` commits it in a checkout, or, where it
    # conflicts, changes nothing
    shown = bloom(stack, "task", "diff", first)
    assert shown.returncode == 0, shown.stderr
    assert "+hi" in shown.stdout
    fresh = clone(demo, tmp_path / "fresh")
    applied = bloom(stack, "task", "apply", first, cwd=fresh)
    assert applied.returncode == 0, applied.stderr
    assert (fresh / "hello.txt").read_text() == "hi\n"
    assert git("log", "-1", "--format=%s", cwd=fresh).strip() == "add a hello file"
    mine = clone(demo, tmp_path / "mine")
    (mine / "hello.txt").write_text("mine\n")
    git("add", "hello.txt", cwd=mine)
    git("commit", "--quiet", "-m", "my own hello", cwd=mine)
    before = git("rev-parse", "HEAD", cwd=mine)
    refused = bloom(stack, "task", "apply", first, cwd=mine)
    assert refused.returncode == 1, refused.stderr
    assert "nothing was changed" in refused.stderr
    assert git("rev-parse", "HEAD", cwd=mine) == before
    assert git("status", "--porcelain", cwd=mine) == ""
    assert (mine / "hello.txt").read_text() == "mine\n"

    # a follow-up in the same context (from the CLI, which prints its diff): one more commit
    # on the branch, the same session
    submitted = bloom(
        stack,
        "task",
        "submit",
        f"and more {shell('echo more >> hello.txt')}",
        "--repo",
        "demo",
        "--context",
        context,
        "--wait",
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "+more" in submitted.stdout
    second = stack.http.get("/llm-tasks", params={"limit": 1}).json()[0]["id"]
    second_task = done(stack, second)
    assert second_task["session_id"] == stack.task(first)["session_id"]
    steps = history(stack, second)["steps"]
    assert [s["task_id"] for s in steps] == [first, second]
    assert steps[1]["base"] == steps[0]["head"]

    # nothing changed: no commit, no patch
    quiet = stack.submit("just say hi", context_id=context, workspace=workspace)
    done(stack, quiet)
    assert history(stack, quiet)["head"] == steps[1]["head"]
    assert patch_of(stack, quiet) is None

    # w1 killed mid-run; the retry on w2 (no mirror yet) starts from the pushed branch
    third = stack.submit(
        f"a third file [[sleep 4]] {shell('echo third > third.txt')}",
        context_id=context,
        workspace=workspace,
    )
    assert stack.wait(third, {"running"}, timeout=60)["worker_id"] == "w1"
    tree = first_worker.work_dir / "workspaces" / "trees" / "demo" / "bloom~ctx-ws"
    wait_for(lambda: working_in(tree), 20, "the CLI to start in the worktree")
    first_worker.kill(signal.SIGKILL)
    stack.add_worker("w2", **WORKSPACE_WORKER)
    retried = done(stack, third, timeout=120)
    assert retried["worker_id"] == "w2"
    steps = history(stack, third)["steps"]
    assert [s["task_id"] for s in steps] == [first, second, third]
    assert steps[2]["base"] == steps[1]["head"]

    git("fetch", "--quiet", "origin", cwd=checkout)
    branch = "origin/bloom/ctx-ws"
    assert git("rev-parse", branch, cwd=checkout).strip() == steps[2]["head"]
    assert trailers(checkout, f"{main}..{branch}") == [third, second, first]
    git("checkout", "--quiet", branch, cwd=checkout)
    assert (checkout / "hello.txt").read_text() == "hi\nmore\n"
    assert (checkout / "third.txt").read_text() == "third\n"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_unpushed_branch_is_rebuilt_from_its_patches_on_another_node(
    stack: Stack, origin: GitServer, demo: str
) -> None:
    first_worker = stack.add_worker("w1", **WORKSPACE_WORKER)
    workspace = {"repo": "demo", "push": False, "branch": "feature/local"}
    first = stack.submit(f"one {shell('echo 1 > one.txt')}", context_id="c", workspace=workspace)
    done(stack, first)
    [step] = history(stack, first)["steps"]
    assert step["pushed"] is False
    assert origin.head("demo", "feature/local") is None
    first_worker.stop()

    stack.add_worker("w2", **WORKSPACE_WORKER)
    second = stack.submit(f"two {shell('echo 2 > two.txt')}", context_id="c", workspace=workspace)
    assert done(stack, second)["worker_id"] == "w2"
    steps = history(stack, second)["steps"]
    assert [s["task_id"] for s in steps] == [first, second]
    # the same commit as w1 made, rebuilt from the patch, and the new one on top
    assert steps[1]["base"] == step["head"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_refused_push_is_reported_and_the_change_kept(
    stack: Stack, origin: GitServer, tmp_path: Path
) -> None:
    url = origin.create("locked", {"README.md": "# locked\n"}, tmp_path / "seed")
    git("config", "http.receivepack", "false", cwd=origin.root / "locked.git")
    assert stack.http.post("/projects", json={"name": "locked", "repo_url": url}).is_success
    stack.add_worker("w1", **WORKSPACE_WORKER)
    workspace = {"repo": "locked"}
    task = stack.submit(f"one {shell('echo 1 > one.txt')}", context_id="c", workspace=workspace)
    done(stack, task)
    [step] = history(stack, task)["steps"]
    assert step["pushed"] is False
    assert step["push_error"]
    assert step["head"] != step["base"]
    patch = patch_of(stack, task)
    assert patch is not None
    assert "+1" in patch
    assert origin.head("locked", step["branch"]) is None
    # nothing changed: no commit, and the run says so
    quiet = stack.submit("only talk", context_id="c", workspace=workspace)
    done(stack, quiet)
    assert history(stack, quiet)["steps"] == [step]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_task_after_a_workspace_task_starts_at_its_head_and_passes_its_patch_on(
    stack: Stack, origin: GitServer, demo: str, tmp_path: Path
) -> None:
    """B, on its own branch, depends on A (not pushed, run on a node that is gone): B's node
    rebuilds A's head from A's patch, B's run sees A's file, and B's branch is A's commit and
    its own. C, after B with its artifacts, gets B's patch in its prompt (echoed by the model)."""
    first_worker = stack.add_worker("w1", **WORKSPACE_WORKER)
    a_workspace = {"repo": "demo", "branch": "feature/a", "push": False}
    a = stack.submit(f"add a {shell('echo a > a.txt')}", context_id="ctx-a", workspace=a_workspace)
    done(stack, a)
    [a_step] = history(stack, a)["steps"]
    assert origin.head("demo", "feature/a") is None
    first_worker.stop()

    made = stack.http.post(
        "/llm-tasks/batch",
        json={
            "tasks": [
                {
                    "context_id": "ctx-b",
                    "agent_slug": "default",
                    "prompt": f"copy a {shell('cat a.txt > b.txt')}",
                    "ref": "b",
                    "depends_on": [a],
                    "workspace": {"repo": "demo", "branch": "feature/b"},
                },
                {
                    "context_id": "ctx-c",
                    "agent_slug": "default",
                    "prompt": "review b",
                    "depends_on": ["b"],
                    "dependency_artifacts": ["b"],
                },
            ]
        },
    )
    assert made.status_code == 201, made.text
    b, c = (task["id"] for task in made.json()["tasks"])
    stack.add_worker("w2", **WORKSPACE_WORKER)
    assert done(stack, b)["worker_id"] == "w2"
    steps = history(stack, b)["steps"]
    assert [s["task_id"] for s in steps] == [a, b]
    assert steps[1]["base"] == a_step["head"]  # rebuilt: the same commit as w1 made

    checkout = clone(demo, tmp_path / "check")
    git("checkout", "--quiet", "feature/b", cwd=checkout)
    assert git("rev-parse", "HEAD", cwd=checkout).strip() == steps[1]["head"]
    assert (checkout / "a.txt").read_text() == "a\n"
    assert (checkout / "b.txt").read_text() == "a\n"  # A's file was in B's worktree
    # B's patch applies on A's head
    git("checkout", "--quiet", "-b", "review", a_step["head"], cwd=checkout)
    patch = patch_of(stack, b)
    assert patch is not None
    subprocess.run(
        ["git", "am", "--quiet"],
        input=patch,
        text=True,
        cwd=checkout,
        check=True,
        capture_output=True,
        env={"GIT_COMMITTER_NAME": "r", "GIT_COMMITTER_EMAIL": "r@x", "PATH": "/usr/bin:/bin"},
    )
    assert git("rev-parse", "HEAD^{tree}", cwd=checkout) == git(
        "rev-parse", f"{steps[1]['head']}^{{tree}}", cwd=checkout
    )

    done(stack, c)
    answer = stack.output(c)
    patch_id = steps[1]["patch_artifact_id"]
    assert f'<artifact id="{patch_id}" type="patch" bytes="{len(patch.encode())}">' in answer
    assert f"Bloom-Task: {b}" in answer
    assert "+a\n" in answer
    assert answer.rstrip().endswith("review b")
