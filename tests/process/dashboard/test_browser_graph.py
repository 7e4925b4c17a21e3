"""A task graph on the dashboard, in Chromium at 1280 and 375 px: the task page shows what a task
waits for and what waits for it, each with its status and a link, and why it is blocked; the
task list filters `blocked` (its count badge and the status filter); the page follows the graph
live as the last dependency completes; nothing scrolls sideways on a phone.

The graph: `plan` and `gate` run by a simulated worker through the worker protocol (they ask for
the gemini CLI, for which no worker has an adapter, so only the simulation takes them),
`left` after `plan` run by the real worker and the real Claude CLI, `review` after `left` and
`gate`: blocked on `gate` until the last test completes it."""

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.process.dashboard.conftest import Pages
from tests.support.stack import Stack, wait_for

SIM = "graph-sim"


def sim_complete(stack: Stack, output: str) -> str:
    """The simulated worker claims its next task and completes it with `output`: its id."""
    grant = stack.http.post(f"/workers/{SIM}/claim", json={"wait_seconds": 5})
    assert grant.status_code == 200, grant.text
    task, lease = grant.json()["task"], grant.json()["lease"]
    done = stack.http.post(
        f"/llm-tasks/{task['id']}/complete",
        json={
            "status": "success",
            "output": output,
            "metrics": {"duration_ms": 5},
            "lease_id": lease["id"],
            "worker_id": SIM,
        },
    )
    assert done.status_code == 200, done.text
    task_id: str = task["id"]
    return task_id


@pytest.fixture(scope="module")
def graph(stack: Stack) -> Iterator[dict[str, str]]:
    caps = {"claude_cli": True, "max_concurrency": 1, "clis": {"gemini": "0.1"}}
    registered = stack.http.post("/workers", json={"name": SIM, "capabilities": caps})
    assert registered.status_code in (200, 201), registered.text

    def item(ref: str, prompt: str, *after: str, **more: Any) -> dict[str, Any]:
        body = {"context_id": f"ctx-graph-{ref}", "agent_slug": "default", "prompt": prompt}
        return body | {"ref": ref, "depends_on": list(after)} | more

    made = stack.http.post(
        "/llm-tasks/batch",
        json={
            "tasks": [
                item("plan", "plan the release", cli="gemini", priority=1000),
                item("gate", "hold the gate", cli="gemini", priority=-1000),
                item("left", "write the left half", "plan"),
                item("review", "review the halves", "left", "gate"),
            ]
        },
    )
    assert made.status_code == 201, made.text
    refs = ("plan", "gate", "left", "review")
    ids = {ref: task["id"] for ref, task in zip(refs, made.json()["tasks"], strict=True)}
    assert sim_complete(stack, "the plan: two halves") == ids["plan"]
    done = stack.wait(ids["left"], timeout=120)  # released, run by the real worker
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert stack.task(ids["review"])["status"] == "blocked"
    yield ids
    stack.http.post(f"/llm-tasks/{ids['gate']}/cancel")  # if a test failed before completing it
    stack.http.delete(f"/workers/{SIM}")


def check_graph(page: Page, stack: Stack, ids: dict[str, str]) -> None:
    page.goto(f"{stack.runtime.url}/tasks/{ids['review']}")
    section = page.locator("#task-graph")
    expect(section).to_be_visible()
    expect(section.get_by_role("status")).to_contain_text(
        "Blocked: waiting on 1 of its 2 dependencies"
    )
    upstream = page.locator("#graph-upstream li")
    expect(upstream).to_have_count(2)
    expect(upstream.nth(0)).to_contain_text("left")
    expect(upstream.nth(0).locator(".badge")).to_have_text("completed")
    expect(upstream.nth(1)).to_contain_text("gate")
    expect(upstream.nth(1).locator(".badge")).to_have_text("queued")
    expect(page.locator("#graph-downstream li")).to_have_text("—")
    upstream.nth(0).get_by_role("link").click()  # to `left`: both sides
    page.wait_for_url(f"{stack.runtime.url}/tasks/{ids['left']}")
    expect(page.locator("#graph-upstream li")).to_contain_text("plan")
    expect(page.locator("#graph-upstream .badge")).to_have_text("completed")
    downstream = page.locator("#graph-downstream li")
    expect(downstream).to_have_count(1)
    expect(downstream.locator(".badge")).to_have_text("blocked")
    expect(downstream.get_by_role("link")).to_have_attribute("href", f"/tasks/{ids['review']}")


def check_blocked_filter(page: Page, stack: Stack, ids: dict[str, str]) -> None:
    page.goto(f"{stack.runtime.url}/tasks")
    badge = page.locator(".counts a.s-blocked")
    expect(badge).to_have_text("blocked 1")
    page.locator("form.filters select[name=status]").select_option("blocked")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/tasks?status=blocked**")
    rows = page.locator("#task-rows tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("review the halves")
    expect(rows.first.locator(".badge").first).to_have_text("blocked")
    expect(rows.first.get_by_role("link").first).to_have_attribute(
        "href", f"/tasks/{ids['review']}"
    )


def test_a_graph_reads_well_on_a_laptop(stack: Stack, pages: Pages, graph: dict[str, str]) -> None:
    page = pages.logged_in("ada", "/tasks", viewport={"width": 1280, "height": 900})
    check_blocked_filter(page, stack, graph)
    check_graph(page, stack, graph)


def test_a_graph_reads_well_on_a_phone(stack: Stack, pages: Pages, graph: dict[str, str]) -> None:
    phone = pages.logged_in("vera", "/tasks", viewport={"width": 375, "height": 812})
    check_blocked_filter(phone, stack, graph)
    check_graph(phone, stack, graph)
    phone.goto(f"{stack.runtime.url}/tasks/{graph['review']}")
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= phone.evaluate("window.innerWidth"), f"the page is {width} px wide"
    box = phone.locator("#task-graph").bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= 375, box


def test_the_page_follows_the_release_live(
    stack: Stack, pages: Pages, graph: dict[str, str]
) -> None:
    page = pages.logged_in(
        "ada", f"/tasks/{graph['review']}", viewport={"width": 1280, "height": 900}
    )
    expect(page.locator("#graph-upstream li").nth(1).locator(".badge")).to_have_text("queued")
    assert sim_complete(stack, "the gate is open") == graph["gate"]
    # no reload: the blocked page refreshes itself and the released task runs on the real worker
    expect(page.locator("#graph-upstream li").nth(1).locator(".badge")).to_have_text(
        "completed", timeout=30_000
    )
    expect(page.locator("#task-graph").get_by_role("status")).to_have_count(0)
    wait_for(lambda: stack.task(graph["review"])["status"] == "completed", 120, "review ran")
    page.reload()
    expect(page.locator("h1 .badge").first).to_have_text("completed")
    expect(page.locator("#result-output")).to_contain_text("the gate is open")
