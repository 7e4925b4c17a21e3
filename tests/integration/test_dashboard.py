"""The dashboard in-process: pages for each role, its actions with their guards, live parts,
filters and pages of tasks, keys shown once, the login round trip, and nothing unescaped.

The browser tests (tests/process/test_dashboard_browser.py) drive the same pages in Chromium.
"""

import re
from pathlib import Path

import httpx
import pytest

from bloom.domain.identity import Role
from bloom.runtime.app import create_app
from bloom.runtime.settings import RuntimeSettings
from tests.support.access import ADMIN_KEY, HEADER, log_in
from tests.support.api import API, success
from tests.support.databases import make_settings

PASSWORD = "correct horse battery staple"
PAGES = ["/", "/tasks", "/workers", "/approvals", "/membridge", "/projects", "/audit", "/settings"]
HX = {"HX-Request": "true"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, api_key=ADMIN_KEY)


async def admin_browser(client: httpx.AsyncClient) -> dict[str, str]:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", PASSWORD, Role.ADMIN)
    return await log_in(client, "ada", PASSWORD)


async def viewer_browser(client: httpx.AsyncClient) -> dict[str, str]:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("vera", PASSWORD, Role.VIEWER)
    return await log_in(client, "vera", PASSWORD)


async def queue(client: httpx.AsyncClient, prompt: str = "p", context: str = "c") -> str:
    task = {"context_id": context, "agent_slug": "default", "prompt": prompt}
    reply = await client.post(f"{API}/llm-tasks", json=task, headers={HEADER: ADMIN_KEY})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def rows(html: str) -> list[str]:
    """The task ids a task table shows, in order."""
    return re.findall(r'<a href="/tasks/([0-9a-f-]{36})">', html)


async def test_every_page_redirects_to_login_and_back(client: httpx.AsyncClient) -> None:
    for page in [*PAGES, "/tasks?status=failed&q=x"]:
        reply = await client.get(page)
        assert reply.status_code == 303, page
        location = httpx.URL(reply.headers["location"])
        assert location.path == "/login"
        assert location.params["next"] == page
    # an htmx request (a live part, an action) sends the whole page to the login
    part = await client.get(
        "/tasks?part=task_rows",
        headers=HX | {"HX-Current-URL": "http://runtime/tasks?status=queued"},
    )
    assert part.headers["hx-redirect"] == "/login?next=%2Ftasks%3Fstatus%3Dqueued"
    action = await client.post("/tasks", headers=HX)
    assert action.headers["hx-redirect"].startswith("/login?next=")
    # the API keeps answering 401, as the seed does
    assert (await client.get(f"{API}/stats")).status_code == 401


async def test_pages_render_for_an_admin_with_the_page_headers(
    client: httpx.AsyncClient,
) -> None:
    browser = await admin_browser(client)
    await queue(client)
    for page in PAGES:
        reply = await client.get(page, headers=browser)
        assert reply.status_code == 200, (page, reply.text[:300])
        assert reply.headers["content-type"].startswith("text/html")
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["cache-control"] == "no-store"
        assert "<script>" not in reply.text  # no inline script anywhere
        assert 'aria-current="page"' in reply.text
    # the Membridge page says Membridge is not answering, rather than failing
    membridge = await client.get("/membridge", headers=browser)
    assert "Membridge is not answering" in membridge.text


async def test_a_viewer_sees_no_buttons_and_is_refused_anyway(client: httpx.AsyncClient) -> None:
    task_id = await queue(client)
    viewer = await viewer_browser(client)
    tasks = await client.get("/tasks", headers=viewer)
    assert tasks.status_code == 200
    assert task_id in tasks.text
    assert "hx-post" not in tasks.text
    assert 'href="/settings"' not in tasks.text
    assert 'href="/projects"' not in tasks.text
    detail = await client.get(f"/tasks/{task_id}", headers=viewer)
    assert "hx-post" not in detail.text
    settings = await client.get("/settings", headers=viewer)
    assert settings.status_code == 403
    assert "This page is for admins." in settings.text
    refused = await client.post(f"/tasks/{task_id}/cancel", headers=viewer | HX)
    assert refused.status_code == 403
    assert refused.json() == {"error": "Forbidden: a viewer may not do this"}
    state = await client.get(f"{API}/llm-tasks/{task_id}", headers={HEADER: ADMIN_KEY})
    assert state.json()["status"] == "queued"


async def test_actions_need_the_htmx_header_and_the_logins_csrf_token(
    client: httpx.AsyncClient,
) -> None:
    browser = await admin_browser(client)
    task_id = await queue(client)
    bare = await client.post(f"/tasks/{task_id}/cancel", headers=browser)
    assert bare.status_code == 403
    assert "dashboard's own pages" in bare.json()["error"]
    no_token = {"Cookie": browser["Cookie"]} | HX
    assert (await client.post(f"/tasks/{task_id}/cancel", headers=no_token)).status_code == 403
    done = await client.post(f"/tasks/{task_id}/cancel", headers=browser | HX)
    assert done.status_code == 200
    assert done.headers["hx-trigger"] == "bloom:changed"
    assert "cancelled" in done.text
    again = await client.post(f"/tasks/{task_id}/cancel", headers=browser | HX)
    assert again.status_code == 409  # the API's refusal, verbatim
    api = await client.post(f"{API}/llm-tasks/{task_id}/cancel", headers={HEADER: ADMIN_KEY})
    assert again.json() == api.json()


async def test_creating_a_task_from_the_form(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    form = (
        "prompt=Say+%3Cb%3Ehi%3C%2Fb%3E&context_id=ctx-9&agent_slug=&desired_format=json"
        "&priority=5&max_attempts=2&timeout_sec=60&budget=0.5&stall_sec=&on_stall="
    )
    made = await client.post("/tasks", content=form, headers=browser | HX | FORM)
    assert made.status_code == 200, made.text
    task_id = made.headers["hx-redirect"].removeprefix("/tasks/")
    task = (await client.get(f"{API}/llm-tasks/{task_id}", headers={HEADER: ADMIN_KEY})).json()
    assert task["prompt"] == "Say <b>hi</b>"
    assert (task["context_id"], task["agent_slug"], task["desired_format"]) == (
        "ctx-9",
        "default",
        "json",
    )
    assert (task["priority"], task["max_attempts"]) == (5, 2)
    assert task["policy"] == {"timeout_sec": 60, "budget": 0.5}  # stalls: the runtime's say
    watched = await client.post(
        "/tasks",
        content="prompt=x&context_id=c&stall_sec=300&on_stall=retry",
        headers=browser | HX | FORM,
    )
    watched_id = watched.headers["hx-redirect"].removeprefix("/tasks/")
    shown = await client.get(f"{API}/llm-tasks/{watched_id}", headers={HEADER: ADMIN_KEY})
    policy = shown.json()["policy"]
    assert (policy["stall_sec"], policy["on_stall"]) == (300, "retry")
    page = await client.get(f"/tasks/{task_id}", headers=browser)
    assert "Say &lt;b&gt;hi&lt;/b&gt;" in page.text
    assert "<b>hi</b>" not in page.text
    # refusals are the API's own words
    empty = await client.post("/tasks", content="prompt=&context_id=c", headers=browser | HX | FORM)
    assert empty.status_code == 400
    assert "prompt" in empty.json()["error"]["fieldErrors"]
    bad = await client.post(
        "/tasks", content="prompt=x&context_id=c&priority=high", headers=browser | HX | FORM
    )
    assert bad.status_code == 400
    assert "priority" in bad.json()["error"]["fieldErrors"]
    unwatched = await client.post(
        "/tasks", content="prompt=x&context_id=c&stall_sec=5", headers=browser | HX | FORM
    )
    assert unwatched.status_code == 400
    assert "stall_sec" in str(unwatched.json()["error"]["fieldErrors"]["policy"])


async def test_task_list_filters_and_keyset_pages(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    clock = client.app.state.container.clock  # type: ignore[attr-defined]
    made = []
    for n in range(55):
        made.append(await queue(client, prompt=f"job {n}", context="a" if n % 2 else "b"))
        clock.advance(1)
    first = await client.get("/tasks", headers=browser)
    assert rows(first.text) == made[::-1][:50]
    older = re.search(r'href="(/tasks\?after=[^"]+)">Older', first.text)
    assert older is not None
    second = await client.get(older.group(1).replace("&amp;", "&"), headers=browser)
    assert rows(second.text) == made[::-1][50:]
    assert "Older" not in second.text
    by_context = await client.get("/tasks?context=a", headers=browser)
    assert rows(by_context.text) == [t for n, t in enumerate(made) if n % 2][::-1]
    by_cli = await client.get("/tasks?context=a&cli=claude", headers=browser)
    assert rows(by_cli.text) == rows(by_context.text)
    assert '<option value="claude" selected>' in by_cli.text
    assert rows((await client.get("/tasks?cli=codex", headers=browser)).text) == []
    assert len(rows((await client.get("/tasks?cli=aider", headers=browser)).text)) == 50
    by_text = await client.get("/tasks?q=job+1", headers=browser)
    assert set(rows(by_text.text)) == {made[n] for n in range(55) if str(n).startswith("1")}
    none = await client.get("/tasks?q=%25nothing_", headers=browser)
    assert rows(none.text) == []
    assert "No task matches" in none.text
    container = client.app.state.container  # type: ignore[attr-defined]
    container.tasks.search_window = 20  # a page searches 20 tasks at most
    window = await client.get("/tasks?q=job+4", headers=browser)  # the newest 20: jobs 54…35
    assert rows(window.text) == [made[n] for n in range(49, 39, -1)]
    assert "A page searches up to 20 tasks" in window.text
    assert "Older" in window.text
    nothing_yet = await client.get("/tasks?q=%25nothing_", headers=browser)
    assert "No match among the 20 tasks searched" in nothing_yet.text
    # a live part is the table alone, keeping the page's filters
    part = await client.get("/tasks?context=a&part=task_rows", headers=browser)
    assert not part.text.lstrip().startswith("<!doctype")
    assert rows(part.text) == rows(by_context.text)
    assert "context=a&amp;part=task_rows" in part.text
    # a part the page does not have is refused, never answered with the whole page
    assert (await client.get("/tasks?part=nope", headers=browser)).status_code == 404
    # a malformed cursor or status is ignored, never a 500
    odd = await client.get("/tasks?after=%%%&status=bogus", headers=browser)
    assert odd.status_code == 200


async def test_task_page_shows_result_attempts_artifact_and_timeline(
    client: httpx.AsyncClient,
) -> None:
    browser = await admin_browser(client)
    admin = {HEADER: ADMIN_KEY}
    task_id = await queue(client, prompt="What is 6*7?")
    await client.post(f"{API}/workers", json={"name": "w1"}, headers=admin)
    grant = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0}, headers=admin)
    lease_id = grant.json()["lease"]["id"]
    usage = {"duration_ms": 1500, "cost_usd": 0.0421, "tokens_used": 99, "model": "claude-q"}
    done = await client.post(
        f"{API}/llm-tasks/{task_id}/complete",
        json=success('{"answer": 42}', lease_id=lease_id, metrics=usage),
        headers=admin,
    )
    assert done.status_code == 200, done.text
    page = await client.get(f"/tasks/{task_id}", headers=browser)
    usage_line = re.search(r'id="result-usage">([^<]*)', page.text)
    assert usage_line is not None
    assert "$0.0421 · 99 tokens · claude-q · on w1" in usage_line[1]
    assert re.search(r'id="task-cli"><a href="/tasks\?cli=claude">claude<', page.text)
    assert 'id="task-model">claude-q<' in page.text
    # the overview: today's cost, in all and for the task's project
    overview = (await client.get("/", headers=browser)).text
    assert re.search(r'id="stat-cost">\$0\.0421<', overview)
    table = overview[overview.index('id="cost-by-project"') :]
    assert re.search(
        r'href="/tasks\?agent=default">default</a></td><td class="num">\$0\.0421<', table
    )
    by_cli = overview[overview.index('id="cost-by-cli"') :]
    assert re.search(r'href="/tasks\?cli=claude">claude</a></td><td class="num">\$0\.0421<', by_cli)
    assert page.status_code == 200
    text = page.text
    assert "What is 6*7?" in text
    assert "completed" in text
    assert lease_id[-8:] in text  # the attempt
    assert "w1" in text
    artifact_id = done.json()["artifact"]["id"]
    assert f"/api/runtime/artifacts/{artifact_id}/content" in text
    assert (
        "{&#34;answer&#34;: 42}" in text or '{"answer": 42}' in text or "&#34;answer&#34;" in text
    )
    assert "task_created" in text
    assert "task_completed" in text
    assert f'data-events="/api/runtime/llm-tasks/{task_id}/events"' in text
    assert 'hx-trigger="every' not in text  # a finished task is not polled
    missing = await client.get("/tasks/no-such-task", headers=browser)
    assert missing.status_code == 404
    assert "No such task" in missing.text


async def test_a_task_held_by_its_projects_budget_says_so(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    task_id = await queue(client, prompt="wait for money")
    put = await client.put(
        f"{API}/budgets/default", json={"daily_usd": 0}, headers={HEADER: ADMIN_KEY}
    )
    assert put.status_code == 200, put.text
    listing = (await client.get("/tasks", headers=browser)).text
    row = listing[listing.index(f'href="/tasks/{task_id}"') :].split("</tr>")[0]
    assert ">held</span>" in row
    page = (await client.get(f"/tasks/{task_id}", headers=browser)).text
    assert 'id="task-hold"' in page
    assert "project <strong>default</strong> has spent its budget" in page
    await client.delete(f"{API}/budgets/default", headers={HEADER: ADMIN_KEY})
    assert 'id="task-hold"' not in (await client.get(f"/tasks/{task_id}", headers=browser)).text


async def test_keys_are_shown_once_and_revoked_from_settings(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    made = await client.post(
        "/settings/keys", content="name=ci&role=viewer&worker_id=", headers=browser | HX | FORM
    )
    assert made.status_code == 200, made.text
    secret = re.search(r'id="new-key-secret">([^<]+)<', made.text)
    assert secret is not None
    key = secret.group(1)
    assert (await client.get(f"{API}/stats", headers={HEADER: key})).status_code == 200
    page = await client.get("/settings", headers=browser)
    assert key not in page.text
    assert key[:14] in page.text  # its prefix
    key_id = re.search(r'hx-post="/settings/keys/([^/]+)/revoke"', page.text)
    assert key_id is not None
    revoked = await client.post(f"/settings/keys/{key_id.group(1)}/revoke", headers=browser | HX)
    assert revoked.status_code == 200
    assert "revoked" in (await client.get("/settings", headers=browser)).text
    worker_without_name = await client.post(
        "/settings/keys", content="name=w&role=worker", headers=browser | HX | FORM
    )
    assert worker_without_name.status_code == 400
    assert "names its worker" in worker_without_name.json()["error"]


async def test_users_are_made_and_their_passwords_set_from_settings(
    client: httpx.AsyncClient,
) -> None:
    browser = await admin_browser(client)
    made = await client.post(
        "/settings/users",
        content="username=bob&password=a+long+enough+password&role=viewer",
        headers=browser | HX | FORM,
    )
    assert made.status_code == 200, made.text
    bob = await log_in(client, "bob", "a long enough password")
    assert (await client.get("/tasks", headers=bob)).status_code == 200
    weak = await client.post(
        "/settings/users/bob/password",
        content="password=x&role=viewer",
        headers=browser | HX | FORM,
    )
    assert weak.status_code == 400
    changed = await client.post(
        "/settings/users/bob/password",
        content="password=another+long+password&role=viewer",
        headers=browser | HX | FORM,
    )
    assert changed.status_code == 200
    assert (await client.get("/tasks", headers=bob)).status_code == 303  # logged out


async def test_audit_page_filters_and_exports(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    first = await queue(client)
    second = await queue(client)
    await client.post(f"{API}/llm-tasks/{second}/cancel", headers={HEADER: ADMIN_KEY})
    page = await client.get("/audit?action=task_cancelled", headers=browser)
    assert page.status_code == 200
    assert f"/tasks/{second}" in page.text
    assert f"/tasks/{first}" not in page.text
    export = await client.get(f"/audit/export.jsonl?entity={first}", headers=browser)
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("application/x-ndjson")
    lines = [httpx.Response(200, content=line).json() for line in export.content.splitlines()]
    assert [entry["action"] for entry in lines] == ["task_created"]
    assert lines[0]["entity_id"] == first


async def test_the_worker_and_membridge_pages(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    empty = await client.get("/workers", headers=browser)
    assert "No workers yet" in empty.text
    registered = await client.post(
        "/workers",
        content="name=pi-1&url=http%3A%2F%2F10.0.0.7%3A8001",
        headers=browser | HX | FORM,
    )
    assert registered.status_code == 200, registered.text
    listed = await client.get(f"{API}/workers/pi-1", headers={HEADER: ADMIN_KEY})
    assert (listed.json()["status"], listed.json()["url"]) == ("unknown", "http://10.0.0.7:8001")
    page = await client.get("/workers", headers=browser)
    assert "pi-1" in page.text
    assert "hx-confirm" in page.text
    assert "Set <code>BLOOM_PUBLIC_URL</code>" in page.text  # no install command without it
    removed = await client.post("/workers/pi-1/remove", headers=browser | HX)
    assert removed.status_code == 200
    assert (await client.get(f"{API}/workers/pi-1", headers={HEADER: ADMIN_KEY})).status_code == 404
    saved = await client.post(
        "/membridge/config",
        content="membridge_server_url=http%3A%2F%2F127.0.0.1%3A9&admin_key=secret-admin-key",
        headers=browser | HX | FORM,
    )
    assert saved.status_code == 200, saved.text
    page = await client.get("/membridge", headers=browser)
    assert "http://127.0.0.1:9" in page.text
    assert "secret-admin-key" not in page.text
    tested = await client.post("/membridge/test", headers=browser | HX)
    assert tested.status_code == 200
    assert "Not connected" in tested.text


async def test_a_worker_that_cannot_run_claude_shows_as_not_ready(
    client: httpx.AsyncClient,
) -> None:
    reason = "The Claude CLI has no credentials: set ANTHROPIC_API_KEY"
    capabilities = {"ready": False, "not_ready": reason}
    for name, caps in (("nokey", capabilities), ("fine", {"ready": True})):
        registered = await client.post(
            f"{API}/workers",
            json={"name": name, "status": "online", "capabilities": caps},
            headers={HEADER: ADMIN_KEY},
        )
        assert registered.status_code in (200, 201), registered.text
    page = await client.get("/workers", headers=await admin_browser(client))
    rows = dict(re.findall(r'<tr id="worker-([\w-]+)">(.*?)</tr>', page.text, re.S))
    assert f'title="{reason}">not ready</span>' in rows["nokey"]
    assert "not ready" not in rows["fine"]


async def test_static_assets_are_served_and_versioned(client: httpx.AsyncClient) -> None:
    browser = await admin_browser(client)
    page = await client.get("/", headers=browser)
    for asset in ("htmx.min.js", "dashboard.js", "dashboard.css"):
        url = re.search(rf'"(/static/{re.escape(asset)}\?v=[0-9a-f]+)"', page.text)
        assert url is not None, asset
        reply = await client.get(url.group(1))
        assert reply.status_code == 200
        assert reply.headers["etag"]


async def test_dashboard_pages_are_rate_limited_like_the_api(
    database_url: str, tmp_path: Path
) -> None:
    from bloom.runtime.app import create_app

    settings = make_settings(  # an anonymous browser: its address's anonymous budget
        database_url, tmp_path, api_key=ADMIN_KEY, rate_limit_anonymous=3, rate_limit_enabled=True
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            answers = [(await http.get("/tasks")).status_code for _ in range(5)]
            static = {(await http.get("/static/dashboard.css")).status_code for _ in range(5)}
    assert answers == [303, 303, 303, 429, 429]
    assert static == {200}


async def test_admins_see_the_install_command_viewers_do_not(
    database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(
        database_url, tmp_path, api_key=ADMIN_KEY, public_url="https://bloom.example.org/"
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            http.app = app  # type: ignore[attr-defined]
            admin = await client_page(http, await admin_browser(http))
            viewer = await client_page(http, await viewer_browser(http))
    command = (
        'curl -fsSL -H "X-Runtime-API-Key: $ADMIN_KEY" "https://bloom.example.org'
        '/api/runtime/agent-install-script?node_id=NODE&amp;with_key=true" | sudo sh'
    )
    assert command in admin
    assert 'data-copy="install-command"' in admin
    assert "agent-install-script" not in viewer


async def client_page(http: httpx.AsyncClient, browser: dict[str, str]) -> str:
    page = await http.get("/workers", headers=browser)
    assert page.status_code == 200
    return page.text


async def test_membridge_page_shows_the_url_and_the_keys_last_four_once(
    client: httpx.AsyncClient,
) -> None:
    browser = await admin_browser(client)
    saved = await client.post(
        "/membridge/config",
        content="membridge_server_url=http%3A%2F%2F127.0.0.1%3A9&admin_key=secret-admin-key",
        headers=browser | HX | FORM,
    )
    assert saved.status_code == 200, saved.text
    page = (await client.get("/membridge", headers=browser)).text
    assert page.count("http://127.0.0.1:9<") == 1  # in the facts, not again as a placeholder
    assert re.search(r'id="membridge-key">\*\*\*\*-key<', page)
    assert "secr" not in page  # the API's mask shows the first four: the page does not
    shown = await client.get(f"{API}/config", headers={HEADER: ADMIN_KEY})
    assert shown.json()["admin_key_masked"] == "secr****-key"  # the seed's contract


async def test_settings_in_open_mode_says_the_api_is_open_on_this_machine(
    database_url: str, tmp_path: Path
) -> None:
    app = create_app(make_settings(database_url, tmp_path))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            page = (await http.get("/settings")).text
    assert "open to every caller on this machine" in page
    assert "only the admin key" not in page


async def test_settings_with_an_admin_key_says_only_it_opens_the_api(
    client: httpx.AsyncClient,
) -> None:
    page = (await client.get("/settings", headers=await admin_browser(client))).text
    assert "only the admin key (<code>RUNTIME_API_KEY</code>) opens the API" in page
    assert "open to every caller" not in page


async def test_the_approvals_page_shows_the_call_and_an_approver_decides(
    client: httpx.AsyncClient,
) -> None:
    admin = {HEADER: ADMIN_KEY}
    await client.post(f"{API}/workers", json={"name": "w1"}, headers=admin)
    policy = {"tools": {"ask": ["Bash(rm:*)"]}}
    body = {"context_id": "c", "agent_slug": "default", "prompt": "p", "policy": policy}
    task_id = (await client.post(f"{API}/llm-tasks", json=body, headers=admin)).json()["id"]
    grant = await client.post(f"{API}/workers/w1/claim", json={"wait_seconds": 0}, headers=admin)
    stopped = {
        "status": "error",
        "error_message": "Waiting for approval",
        "error_code": "approval_required",
        "metrics": {"duration_ms": 1},
        "lease_id": grant.json()["lease"]["id"],
        "approval": {
            "tool_use_id": "toolu_9",
            "tool_name": "Bash",
            "tool_input": {"command": "rm -rf build/<old>"},
        },
    }
    done = await client.post(f"{API}/llm-tasks/{task_id}/complete", json=stopped, headers=admin)
    assert done.status_code == 200, done.text
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("pat", PASSWORD, Role.APPROVER)
    approver = await log_in(client, "pat", PASSWORD)
    viewer = await viewer_browser(client)

    badge = await client.get("/approvals?part=approvals_badge", headers=viewer)
    assert ">1</span>" in badge.text
    seen = await client.get("/approvals", headers=viewer)
    assert "$ rm -rf build/&lt;old&gt;" in seen.text  # the command as a command, escaped
    assert "Approve" not in seen.text  # a viewer decides nothing
    task_page = await client.get(f"/tasks/{task_id}", headers=viewer)
    assert 'id="task-awaiting"' in task_page.text
    (approval,) = (await client.get(f"{API}/approvals", headers=admin)).json()
    url = f"/approvals/{approval['id']}/decision"
    refused = await client.post(url, content="decision=approve", headers=viewer | HX | FORM)
    assert refused.status_code == 403
    page = await client.get("/approvals", headers=approver)
    assert f'hx-post="{url}"' in page.text
    decided = await client.post(
        url, content="decision=deny&note=not+today", headers=approver | HX | FORM
    )
    assert decided.status_code == 200, decided.text
    assert "Bash call denied" in decided.text
    task = (await client.get(f"{API}/llm-tasks/{task_id}", headers=admin)).json()
    assert task["status"] == "queued"
    again = await client.post(url, content="decision=approve", headers=approver | HX | FORM)
    assert again.status_code == 409
    after = await client.get("/approvals", headers=viewer)
    assert "not today" in after.text
    assert "pat" in after.text
    badge = await client.get("/approvals?part=approvals_badge", headers=viewer)
    assert badge.status_code == 200
    assert "badge" not in badge.text.split(">", 1)[1]  # nothing pending: no count
