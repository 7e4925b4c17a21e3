"""An operator's walkthrough in Chromium: log in, create a task and watch its output arrive,
open its artifact, cancel a running task, requeue a failed one, set Membridge's URL and test
it, promote a primary, make and revoke a key, and a viewer who sees no buttons; the pages fit
a phone and follow the system's dark mode."""

import re

import httpx
from playwright.sync_api import Page, Route, expect

from bloom.domain.ids import canonical_id
from tests.process.dashboard.conftest import Pages
from tests.support.stack import Stack, wait_for


def task_id_of(page: Page) -> str:
    found = re.search(r"/tasks/([0-9a-f-]{36})$", page.url)
    assert found is not None, page.url
    return found.group(1)


def leases_of(stack: Stack, task_id: str) -> list[dict[str, object]]:
    leases = stack.http.get("/leases", params={"limit": 1000}).json()
    return [lease for lease in leases if lease["task_id"] == task_id]


def accept_confirmations(page: Page) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_a_task_made_in_the_browser_streams_its_output_live(stack: Stack, pages: Pages) -> None:
    page = pages.logged_in("ada", "/tasks")
    page.get_by_label("Prompt").fill("Hello from the browser [[sleep 3]]")
    page.get_by_role("button", name="Create task").click()
    page.wait_for_url(re.compile(r"/tasks/[0-9a-f-]{36}$"))
    task_id = task_id_of(page)
    assert stack.task(task_id)["status"] != "completed"  # the page is open before the answer
    output = page.locator("pre.output")
    expect(output).to_contain_text("started on w1", timeout=30_000)
    expect(output).to_contain_text("echo: Hello from the browser", timeout=30_000)
    expect(output).to_contain_text("run finished: success")
    expect(page.locator("#task-detail h1 .badge").first).to_have_text("completed", timeout=15_000)
    expect(page.locator("pre.artifact")).to_contain_text("echo: Hello from the browser")
    download = page.get_by_role("link", name="Download")
    content = httpx.get(
        stack.runtime.url + str(download.get_attribute("href")), headers=stack.headers
    )
    assert content.text.startswith("echo: Hello from the browser")
    # the overview counts it, and the task list links to it
    page.goto(stack.runtime.url + "/")
    expect(page.locator("#overview-body")).to_contain_text("Hello from the browser")
    expect(page.locator("#stat-workers")).to_contain_text("1")


def test_cancel_a_running_task_and_requeue_a_failed_one(stack: Stack, pages: Pages) -> None:
    page = pages.logged_in("ada", "/tasks")
    accept_confirmations(page)
    hanging = stack.submit("hang [[sleep 60]]", policy={"timeout_sec": 300})
    stack.wait(hanging, statuses={"running"}, timeout=30)
    page.goto(f"{stack.runtime.url}/tasks/{hanging}")
    page.locator("#task-detail").get_by_role("button", name="Cancel").click()
    expect(page.locator("#task-detail h1")).to_contain_text("cancelled", timeout=30_000)
    assert stack.wait(hanging)["status"] == "cancelled"

    failing = stack.submit("expensive [[tokens 200000]]", policy={"budget": 0.01})
    assert stack.wait(failing)["status"] == "failed"
    page.goto(f"{stack.runtime.url}/tasks?status=failed")
    row = page.locator("tr", has=page.locator(f'a[href="/tasks/{failing}"]'))
    row.get_by_role("button", name="Requeue").click()
    expect(page.locator("#flash")).to_contain_text("queued again")
    wait_for(lambda: len(leases_of(stack, failing)) == 2 or None, 30, "a second attempt")
    # a refusal reads as the API words it: a completed task cannot be cancelled
    done = stack.submit("quick")
    stack.wait(done)
    page.goto(f"{stack.runtime.url}/tasks/{done}")
    cancel = "id => htmx.ajax('POST', `/tasks/${id}/cancel`, {target: '#flash', swap: 'beforeend'})"
    page.evaluate(cancel, done)
    expect(page.locator("#flash .notice.error")).to_contain_text("409")


def test_membridge_url_test_connection_and_promote_a_primary(stack: Stack, pages: Pages) -> None:
    project = "browser-proj"
    cid = canonical_id(project)
    membridge = httpx.Client(
        base_url=stack.membridge.url, headers={"X-MEMBRIDGE-ADMIN": stack.membridge.admin_key or ""}
    )
    with membridge:
        assert membridge.post("/projects", json={"name": project}).status_code in (200, 201)
        for node in ("node-a", "node-b"):
            beat = membridge.post(
                "/agent/heartbeat", json={"node_id": node, "canonical_id": cid, "obs_count": 3}
            )
            assert beat.status_code == 200, beat.text
    page = pages.logged_in("ada", "/membridge")
    accept_confirmations(page)
    page.get_by_label("Server URL").fill(stack.membridge.url)
    page.get_by_label("Admin key").fill(stack.membridge.admin_key or "")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_contain_text("Saved")
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#flash")).to_contain_text("Connected: Membridge")
    page.get_by_role("link", name=project).click()
    page.wait_for_url(re.compile(r"project="))
    expect(page.locator("#membridge-project")).to_contain_text("needs a primary")
    page.get_by_label("Node id").select_option("node-b")
    page.get_by_role("button", name="Promote").click()
    expect(page.locator("#flash")).to_contain_text("node-b is now the primary")
    expect(page.locator("#primary")).to_have_text("node-b", timeout=20_000)
    page.goto(f"{stack.runtime.url}/audit?action=leadership_promote")
    expect(page.locator("#audit-rows")).to_contain_text("Promoted primary to node-b")


def test_an_admin_makes_and_revokes_a_key_and_a_viewer_cannot(stack: Stack, pages: Pages) -> None:
    admin = pages.logged_in("ada", "/settings")
    accept_confirmations(admin)
    form = admin.locator("form", has=admin.get_by_role("button", name="Create key"))
    form.get_by_label("Name", exact=True).fill("ci-viewer")
    form.get_by_label("Role").select_option("viewer")
    form.get_by_role("button", name="Create key").click()
    secret = admin.locator("#new-key-secret").inner_text().strip()
    assert secret.startswith("bloom_viewer_")
    reply = httpx.get(
        f"{stack.runtime.url}/api/runtime/stats", headers={"X-Runtime-API-Key": secret}
    )
    assert reply.status_code == 200
    row = admin.locator("#key-rows tr", has_text="ci-viewer")
    expect(row).not_to_contain_text(secret)
    row.get_by_role("button", name="Revoke").click()
    expect(admin.locator("#key-rows tr", has_text="ci-viewer")).to_contain_text("revoked")

    viewer = pages.logged_in("vera", "/tasks")
    expect(viewer.get_by_role("link", name="Settings")).to_have_count(0)
    expect(viewer.locator("#create")).to_have_count(0)
    expect(viewer.locator("button", has_text=re.compile("Cancel|Requeue"))).to_have_count(0)
    viewer.goto(f"{stack.runtime.url}/settings")
    expect(viewer.locator("main")).to_contain_text("This page is for admins")


NAV_ROWS = "new Set([...document.querySelectorAll('header.top > *')].map(e => e.offsetTop)).size"


def test_pages_fit_a_phone_and_follow_dark_mode(stack: Stack, pages: Pages) -> None:
    """No page scrolls sideways at 375 px (wide tables scroll in their own box), the header
    takes two rows, and the audit's detail stays readable."""
    task_id = stack.submit("on a phone")
    stack.wait(task_id)
    phone = pages.logged_in("ada", "/", viewport={"width": 375, "height": 812}, color_scheme="dark")
    expect(phone.locator("#cost-by-cli")).to_contain_text("claude")  # the cost per agent CLI
    paths = ("/", "/tasks?cli=claude", f"/tasks/{task_id}", "/workers", "/membridge", "/audit")
    for path in (*paths, "/settings", "/projects"):
        phone.goto(stack.runtime.url + path)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= phone.evaluate("window.innerWidth"), f"{path} is {width} px wide"
        assert phone.evaluate(NAV_ROWS) <= 2, f"{path}'s header takes more than two rows"
    phone.goto(stack.runtime.url + f"/tasks/{task_id}")
    expect(phone.locator("#task-cli")).to_have_text("claude")
    phone.locator("#task-cli a").click()  # its CLI's tasks: the filter chosen, the task listed
    expect(phone.locator("form.filters select[name=cli]")).to_have_value("claude")
    expect(phone.locator("#task-rows")).to_contain_text("on a phone")
    phone.goto(stack.runtime.url + "/audit")
    detail = phone.locator("#audit-rows td.detail").first.bounding_box()
    assert detail is not None
    assert detail["width"] >= 120, detail
    background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(n) for n in re.findall(r"\d+", background)[:3])
    assert red + green + blue < 150, background  # dark


def test_the_api_reference_renders_offline_from_the_runtime_alone(
    stack: Stack, pages: Pages
) -> None:
    """No network but the runtime: Swagger UI's files are the server's own, under its CSP."""
    page = pages.open()
    elsewhere: list[str] = []

    def only_the_runtime(route: Route) -> None:
        if route.request.url.startswith(stack.runtime.url + "/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_the_runtime)
    answer = page.goto(stack.runtime.url + "/api/docs")  # no key: the reference is public
    assert answer is not None
    assert "cdn.jsdelivr.net" not in answer.headers["content-security-policy"]
    expect(page.get_by_text("/api/runtime/llm-tasks", exact=True).first).to_be_visible()
    expect(page.locator(".opblock").first).to_be_visible()
    assert elsewhere == []
