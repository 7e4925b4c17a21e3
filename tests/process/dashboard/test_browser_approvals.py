"""Approvals in Chromium at 1280 and 375 px (issue 33): a task whose agent wants a `Bash` call in
its `ask` rules (the real worker, the real Claude CLI, the echo model) shows up on the approvals
page with the command shown as a command and a count in the navigation; an approver's Approve
finishes the task with the command's output in its answer; a deny with a note reaches the agent;
a viewer sees the calls but no buttons; nothing scrolls sideways on a phone."""

from typing import Any

from playwright.sync_api import Page, expect

from tests.process.dashboard.conftest import Pages
from tests.support.stack import Stack

ASK = {"tools": {"ask": ["Bash"]}}


def asked(stack: Stack, command: str) -> str:
    prompt = f'run it [[tool Bash {{"command": "{command}"}}]]'
    task_id = stack.submit(prompt, policy=ASK)
    stack.wait(task_id, {"awaiting_approval"}, timeout=90)
    return task_id


def card(page: Page, command: str) -> Any:
    return page.locator("li.approval", has_text=command)


def test_an_approver_approves_from_the_page_and_the_task_finishes(
    stack: Stack, pages: Pages
) -> None:
    task_id = asked(stack, "echo approved-in-the-browser")
    page = pages.logged_in("pat", "/approvals", viewport={"width": 1280, "height": 900})
    expect(page.locator("#approvals-badge .badge")).to_have_text("1")
    waiting = card(page, "echo approved-in-the-browser")
    expect(waiting.locator("pre.command")).to_have_text("$ echo approved-in-the-browser")
    expect(waiting).to_contain_text(task_id[-8:])
    waiting.get_by_label("Note").fill("looks harmless")
    waiting.get_by_role("button", name="Approve").click()
    expect(page.locator("#flash")).to_contain_text("Bash call approved")
    done = stack.wait(task_id, timeout=90)
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert stack.output(task_id) == "echo: approved-in-the-browser"
    expect(page.locator("#decided-rows")).to_contain_text("looks harmless")
    expect(card(page, "echo approved-in-the-browser")).to_have_count(0)
    # every tool call in the record, on the task's page
    page.goto(f"{stack.runtime.url}/tasks/{task_id}")
    calls = page.locator("#tool-calls li")
    expect(calls).to_have_count(2)
    expect(calls.nth(0)).to_contain_text("Bash: echo approved-in-the-browser (asked)")
    expect(calls.nth(1)).to_contain_text("Bash: echo approved-in-the-browser (approved by pat)")


def test_a_denial_from_a_phone_reaches_the_agent_and_a_viewer_only_reads(
    stack: Stack, pages: Pages
) -> None:
    task_id = asked(stack, "echo denied-on-a-phone")
    viewer = pages.logged_in("vera", "/approvals", viewport={"width": 1280, "height": 900})
    expect(card(viewer, "echo denied-on-a-phone")).to_be_visible()
    expect(viewer.get_by_role("button", name="Approve")).to_have_count(0)
    phone = pages.logged_in("pat", f"/tasks/{task_id}", viewport={"width": 375, "height": 812})
    expect(phone.locator("#task-awaiting")).to_be_visible()
    phone.locator("#task-awaiting a", has_text="approvals page").click()
    waiting = card(phone, "echo denied-on-a-phone")
    expect(waiting).to_be_visible()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= phone.evaluate("window.innerWidth"), f"the page is {width} px wide"
    waiting.get_by_label("Note").fill("not from a phone")
    waiting.get_by_role("button", name="Deny").click()
    expect(phone.locator("#flash")).to_contain_text("Bash call denied")
    done = stack.wait(task_id, timeout=90)
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert "not from a phone" in stack.output(task_id)
