"""A workspace task's change on its page, in Chromium at 1280 and 375 px: the branch and its
commits, the files with their counts, the diff colored line by line, a large file collapsed, the
patch downloadable, nothing scrolling sideways on a phone; the task list marks the task.

The change is a real `git format-patch` of a real repository, reported through the worker
protocol as a worker reports it (the real worker's part is tests/process/test_workspace_e2e.py).
"""

import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.process.dashboard.conftest import Pages
from tests.support.git_http import git
from tests.support.stack import Stack

BIG_LINES = 300


def made_change(where: Path) -> tuple[str, str, str]:
    """A repository with a commit changing two files (one by 300 lines); base, head, patch."""
    git("init", "--quiet", "--initial-branch=main", str(where))
    (where / "hello.txt").write_text("hello\n")
    (where / "big.txt").write_text("")
    git("add", "--all", cwd=where)
    git("commit", "--quiet", "-m", "initial", cwd=where)
    base = git("rev-parse", "HEAD", cwd=where).strip()
    (where / "hello.txt").write_text("hello, world\n")
    (where / "big.txt").write_text("".join(f"line {n}\n" for n in range(BIG_LINES)))
    git("commit", "--quiet", "--all", "-m", "say more", cwd=where)
    head = git("rev-parse", "HEAD", cwd=where).strip()
    return base, head, git("format-patch", "--stdout", f"{base}..{head}", cwd=where)


@pytest.fixture(scope="module")
def changed_task(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    base, head, patch = made_change(tmp_path_factory.mktemp("repo") / "demo")
    stack.http.post("/projects", json={"name": "web", "repo_url": "https://git.example/web.git"})
    caps = {"claude_cli": True, "max_concurrency": 1, "workspaces": True}
    registered = stack.http.post("/workers", json={"name": "ws-sim", "capabilities": caps})
    assert registered.status_code in (200, 201), registered.text
    made = stack.http.post(
        "/llm-tasks",
        json={
            "context_id": "ctx-web",
            "agent_slug": "default",
            "prompt": "say more",
            "priority": 1000,
            "workspace": {"repo": "web"},
        },
    )
    assert made.status_code == 201, made.text
    grant = stack.http.post("/workers/ws-sim/claim", json={"wait_seconds": 5}).json()
    assert grant["task"]["id"] == made.json()["id"]
    workspace = {
        "base": base,
        "head": head,
        "branch": "bloom/ctx-web",
        "pushed": False,
        "push_error": "remote: Permission to web.git denied to a-node.",
        "files_changed": 2,
        "insertions": BIG_LINES + 1,
        "deletions": 1,
    }
    done = stack.http.post(
        f"/llm-tasks/{grant['task']['id']}/complete",
        json={
            "status": "success",
            "output": "said more",
            "metrics": {"duration_ms": 5},
            "lease_id": grant["lease"]["id"],
            "worker_id": "ws-sim",
            "workspace": workspace,
            "patch": patch,
        },
    )
    assert done.status_code == 200, done.text
    stack.http.delete("/workers/ws-sim")
    task_id: str = grant["task"]["id"]
    return task_id


def check_change(page: Page, stack: Stack, task_id: str) -> None:
    change = page.locator("#change")
    expect(change).to_be_visible()
    expect(page.locator("#change-summary")).to_contain_text("bloom/ctx-web")
    expect(page.locator("#change-summary")).to_contain_text("2 files")
    expect(page.locator("#change-summary")).to_contain_text("not pushed: remote: Permission")
    files = page.locator(".diff-files li")
    expect(files).to_have_count(2)
    expect(files.filter(has_text="hello.txt")).to_contain_text("+1")
    expect(files.filter(has_text="big.txt")).to_contain_text(f"+{BIG_LINES}")
    small = page.locator("details.diff-file", has_text="hello.txt")
    big = page.locator("details.diff-file", has_text="big.txt")
    expect(small).to_have_attribute("open", "")
    expect(big).not_to_have_attribute("open", re.compile(".*"))
    added = small.locator(".d-add").first
    removed = small.locator(".d-del").first
    expect(added).to_have_text("+hello, world")
    expect(removed).to_have_text("-hello")
    colors = {
        kind: line.evaluate("e => getComputedStyle(e).color") for kind, line in
        (("add", added), ("del", removed), ("hunk", small.locator(".d-hunk").first))
    }  # fmt: skip
    assert len(set(colors.values())) == 3, colors
    big.locator("summary").click()
    expect(big.locator(".d-add")).to_have_count(BIG_LINES)
    download = page.get_by_role("link", name="Download patch")
    content = httpx.get(
        stack.runtime.url + str(download.get_attribute("href")), headers=stack.headers
    )
    assert content.text.startswith("From ")
    assert "+line 299" in content.text
    # the answer is the output, not the patch
    expect(page.locator("#result-output")).to_have_text("said more")


def test_a_change_reads_well_on_a_laptop(stack: Stack, pages: Pages, changed_task: str) -> None:
    page = pages.logged_in("ada", "/tasks", viewport={"width": 1280, "height": 900})
    expect(page.locator("#task-rows .badge.branch").first).to_contain_text("web · bloom/ctx-web")
    page.goto(f"{stack.runtime.url}/tasks/{changed_task}")
    expect(page.locator("#task-workspace")).to_contain_text("web")
    check_change(page, stack, changed_task)


def test_a_change_reads_well_on_a_phone(stack: Stack, pages: Pages, changed_task: str) -> None:
    phone = pages.logged_in("ada", f"/tasks/{changed_task}", viewport={"width": 375, "height": 812})
    check_change(phone, stack, changed_task)
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= phone.evaluate("window.innerWidth"), f"the page is {width} px wide"
    diff = phone.locator("details.diff-file pre.diff").first.bounding_box()
    assert diff is not None
    assert diff["width"] <= 375, diff
