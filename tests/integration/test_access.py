"""Identities, roles and ownership: the authorization matrix generated from the app's own route
table, worker keys confined to their own worker and leases, browser sessions with CSRF, and
credentials that are wrong in every way answering 401, never 500."""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.domain.identity import Role
from bloom.runtime import auth
from bloom.runtime.access import RULES, Access, route_table
from bloom.runtime.app import create_app
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.tables import api_keys, users
from tests.support.access import ADMIN_KEY, HEADER, log_in, submit_login
from tests.support.api import API, success
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe

PASSWORD = "correct horse battery staple"
SELF_CHECKED = {("POST", "/login"), ("POST", "/logout")}
"""Public routes that check their own CSRF token (and so may answer 403 to a bare request)."""
ALLOWED = {
    "none": frozenset[Role](),
    "viewer": Access.READ.value | Access.READ_OR_WORKER.value,
    "user": Access.READ.value | Access.READ_OR_WORKER.value,  # a viewer who logged in
    "worker": Access.WORKER.value | Access.READ_OR_WORKER.value,
    "other_worker": frozenset[Role](),  # everything worker-ish here belongs to "worker"
    "admin": frozenset(Role),
}
ROLE_OF = {
    "viewer": Role.VIEWER,
    "user": Role.VIEWER,
    "worker": Role.WORKER,
    "other_worker": Role.WORKER,
    "admin": Role.ADMIN,
}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(database_url, tmp_path, api_key=ADMIN_KEY)


@dataclass
class World:
    """A task leased to worker `wa`, an artifact, and a caller of each kind."""

    task_id: str
    lease_id: str
    artifact_id: str
    callers: dict[str, dict[str, str]] = field(default_factory=dict)

    def headers(self, who: str) -> dict[str, str]:
        return self.callers[who]


async def build_world(client: httpx.AsyncClient) -> World:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    admin = {HEADER: ADMIN_KEY}
    for name in ("wa", "wb"):
        reply = await client.post(
            f"{API}/workers",
            json={"name": name, "capabilities": {"max_concurrency": 4}},
            headers=admin,
        )
        assert reply.status_code == 201
    keys = {
        "worker": (await credentials.create_key("a", Role.WORKER, "wa")).secret,
        "other_worker": (await credentials.create_key("b", Role.WORKER, "wb")).secret,
        "viewer": (await credentials.create_key("v", Role.VIEWER)).secret,
    }
    await credentials.create_user("vera", PASSWORD, Role.VIEWER)
    task = {"context_id": "c", "agent_slug": "default", "prompt": "p"}
    done_id = (await client.post(f"{API}/llm-tasks", json=task, headers=admin)).json()["id"]
    claimed = await client.post(
        f"{API}/workers/wa/claim", json={"wait_seconds": 0}, headers={HEADER: keys["worker"]}
    )
    done = await client.post(
        f"{API}/llm-tasks/{done_id}/complete",
        json=success("answer", lease_id=claimed.json()["lease"]["id"]),
        headers={HEADER: keys["worker"]},
    )
    assert done.status_code == 200, done.text
    task_id = (await client.post(f"{API}/llm-tasks", json=task, headers=admin)).json()["id"]
    grant = await client.post(
        f"{API}/workers/wa/claim", json={"wait_seconds": 0}, headers={HEADER: keys["worker"]}
    )
    assert grant.json()["task"]["id"] == task_id
    world = World(task_id, grant.json()["lease"]["id"], done.json()["artifact"]["id"])
    world.callers = {
        "none": {},
        "admin": admin,
        "user": await log_in(client, "vera", PASSWORD),
        **{who: {HEADER: key} for who, key in keys.items()},
    }
    return world


def request_for(method: str, path: str, world: World) -> tuple[str, dict[str, Any] | None]:
    """A concrete, well-formed request for a route of the table (ids of the world)."""
    url = (
        path.replace("{task_id}", world.task_id)
        .replace("{worker_id}", "wa")
        .replace("{artifact_id}", world.artifact_id)
        .replace("{name}", "x")
        .replace("{cid}", "abc")
        .replace("{job_id}", "j1")
        .replace("{key_id}", "k1")
        .replace("{username}", "vera")
        .replace("{project_id}", "p1")
        .replace("{approval_id}", "a1")
    )
    lease = {"lease_id": world.lease_id}
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", f"{API}/workers"): {"name": "wa", "capabilities": {"max_concurrency": 4}},
        ("POST", f"{API}/workers/{{worker_id}}/claim"): {"wait_seconds": 0},
        ("POST", f"{API}/workers/{{worker_id}}/complete"): {
            "completes": [success("x", task_id=world.task_id, **lease)]
        },
        ("POST", f"{API}/llm-tasks"): {"context_id": "c", "agent_slug": "d", "prompt": "p"},
        ("POST", f"{API}/llm-tasks/{{task_id}}/heartbeat"): lease,
        ("POST", f"{API}/llm-tasks/{{task_id}}/complete"): success("x", **lease),
        ("POST", f"{API}/llm-tasks/{{task_id}}/events"): lease
        | {"events": [{"type": "note", "data": {}}]},
        ("POST", f"{API}/config"): {"membridge_server_url": "http://127.0.0.1:9", "admin_key": "k"},
        ("POST", f"{API}/llm-tasks/{{task_id}}/decisions"): lease,
        ("POST", f"{API}/approvals/{{approval_id}}/decision"): {"decision": "approve"},
    }
    if (method, path) == ("GET", f"{API}/llm-tasks/{{task_id}}/events"):
        url += "?follow=false"
    return url, bodies.get((method, path), {} if method == "POST" else None)


HX = {"HX-Request": "true"}  # as the dashboard's pages send their requests


def is_dashboard(path: str) -> bool:
    """A page or action of the dashboard (its login aside, which checks its own token)."""
    return not path.startswith(("/api/", "/metrics", "/docs", "/login", "/logout"))


def sent_to_login(reply: httpx.Response) -> bool:
    target = reply.headers.get("location") or reply.headers.get("hx-redirect") or ""
    return reply.status_code in (200, 303) and target.startswith("/login?next=")


def expected_denial(who: str, access: Access) -> int | None:
    """401 or 403 when `who` may not call a route with `access`, else None."""
    if access is Access.PUBLIC:
        return None
    if who == "none":
        return 401
    allowed = ALLOWED[who] & access.value
    return None if ROLE_OF[who] in allowed else 403


async def test_every_route_has_a_rule_and_every_rule_a_route(client: httpx.AsyncClient) -> None:
    table = route_table(client.app)  # type: ignore[attr-defined]
    assert [route for route in table if route not in RULES] == []
    assert [rule for rule in RULES if rule not in table] == []


async def test_authorization_matrix(client: httpx.AsyncClient) -> None:
    """Every route times {no credentials, viewer, worker, other worker, admin, logged-in user},
    each answer a status the OpenAPI document declares for the operation.

    Denied callers go first and state-changing admin calls last, so that what an allowed call
    changes never turns a later denial into something else."""
    world = await build_world(client)
    table = sorted(route_table(client.app), key=lambda r: (r[0] == "DELETE", r))  # type: ignore[attr-defined]
    order = ["none", "viewer", "user", "other_worker", "worker", "admin"]
    documented = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    failures: list[tuple[object, ...]] = []
    for method, path in table:
        url, body = request_for(method, path, world)
        declared = documented.get(path, {}).get(method.lower(), {}).get("responses")
        page = is_dashboard(path)
        for who in order:
            headers = world.headers(who) | (HX if page else {})
            reply = await client.request(method, url, json=body, headers=headers)
            if declared is not None and not {str(reply.status_code), "default"} & set(declared):
                failures.append((method, path, who, "undocumented", reply.status_code))
            denial = expected_denial(who, RULES[(method, path)])
            if (method, path) in SELF_CHECKED:
                ok = reply.status_code != 401
            elif page and denial == 401:  # a browser without a login goes to the login page
                ok = sent_to_login(reply)
            elif denial is None:
                upstream_down = (
                    path.startswith(("/api/membridge", "/membridge/")) and reply.status_code == 502
                )
                ok = reply.status_code not in (401, 403) and (
                    reply.status_code < 500 or upstream_down
                )
            else:
                ok = reply.status_code == denial
            if not ok:
                failures.append((method, path, who, denial, reply.status_code, reply.text[:120]))
    assert failures == [], "\n".join(map(str, failures))


async def test_a_worker_cannot_touch_another_workers_lease(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    world = await build_world(client)
    other = world.headers("other_worker")
    before = probe.snapshot(world.task_id)
    lease = {"lease_id": world.lease_id}
    attempts = [
        ("POST", f"{API}/llm-tasks/{world.task_id}/heartbeat", lease),
        ("POST", f"{API}/llm-tasks/{world.task_id}/heartbeat", {}),  # "the current lease"
        ("POST", f"{API}/llm-tasks/{world.task_id}/complete", success("stolen", **lease)),
        ("POST", f"{API}/llm-tasks/{world.task_id}/events", lease | {"events": []}),
        ("POST", f"{API}/llm-tasks/{world.task_id}/cancel", None),
        ("GET", f"{API}/llm-tasks/{world.task_id}/events?follow=false", None),
        ("GET", f"{API}/llm-tasks/{world.task_id}", None),  # nor read its prompt
        ("POST", f"{API}/workers/wa/claim", {"wait_seconds": 0}),
        ("POST", f"{API}/workers", {"name": "wa", "status": "offline"}),
        ("POST", f"{API}/llm-tasks/{world.task_id}/heartbeat", lease | {"worker_id": "wa"}),
    ]
    for method, url, body in attempts:
        reply = await client.request(method, url, json=body, headers=other)
        assert reply.status_code == 403, (method, url, reply.text)
        assert "error" in reply.json()
    assert probe.snapshot(world.task_id) == before
    assert probe.count(api_keys) == 3
    # its own worker's work it may do
    own = world.headers("worker")
    beat = await client.post(f"{API}/llm-tasks/{world.task_id}/heartbeat", json=lease, headers=own)
    assert beat.status_code == 200


async def test_a_revoked_key_and_an_unknown_key_are_refused(
    client: httpx.AsyncClient, probe: DatabaseProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "KEY_CACHE_SEC", 0.0)  # else a revocation takes up to 10 s
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    made = await credentials.create_key("v", Role.VIEWER)
    assert (await client.get(f"{API}/stats", headers={HEADER: made.secret})).status_code == 200
    unknown = await client.get(f"{API}/stats", headers={HEADER: made.secret + "x"})
    assert unknown.status_code == 401
    await credentials.revoke_key(made.key.prefix)
    assert (await client.get(f"{API}/stats", headers={HEADER: made.secret})).status_code == 401
    [row] = probe.rows(api_keys.select())
    assert made.secret not in str(row)
    assert row["prefix"] == made.secret[:14]
    assert row["revoked_at"] is not None


@pytest.mark.parametrize(
    "value",
    [
        "ключ-не-ascii".encode(),
        b"\xff\xfe\x00garbage",
        b"x" * 10_000,
        b"",
        b"bloom_admin_" + b"A" * 43,
        ADMIN_KEY.encode()[:-1],
        ADMIN_KEY.encode() + b" ",
    ],
)
async def test_malformed_credentials_give_401_never_500(
    client: httpx.AsyncClient, value: bytes
) -> None:
    reply = await client.get(f"{API}/stats", headers=[(HEADER.encode(), value)])
    assert reply.status_code == 401
    assert reply.json() == {"error": "Unauthorized"}
    cookie = await client.get(f"{API}/stats", headers=[(b"cookie", b"bloom_session=" + value)])
    assert cookie.status_code == 401


async def test_a_session_acts_with_the_users_role_and_needs_csrf_to_change_things(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", PASSWORD, Role.ADMIN)
    browser = await log_in(client, "ada", PASSWORD)
    task = {"context_id": "c", "agent_slug": "default", "prompt": "p"}
    assert (await client.get(f"{API}/llm-tasks", headers=browser)).status_code == 200
    no_csrf = {"Cookie": browser["Cookie"]}
    refused = await client.post(f"{API}/llm-tasks", json=task, headers=no_csrf)
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]
    wrong = await client.post(
        f"{API}/llm-tasks", json=task, headers=no_csrf | {"X-CSRF-Token": "nope"}
    )
    assert wrong.status_code == 403
    assert probe.tasks() == []
    made = await client.post(f"{API}/llm-tasks", json=task, headers=browser)
    assert made.status_code == 201

    # logging out needs the token too; afterwards the browser is anonymous (the cookie is gone)
    assert (await client.post("/logout", headers=no_csrf)).status_code == 403
    out = await client.post("/logout", headers=browser)
    assert out.status_code == 303
    assert 'bloom_session=""' in out.headers["set-cookie"]

    # a new password ends the sessions made with the old one
    await credentials.set_password("ada", PASSWORD + "!", Role.ADMIN)
    assert (await client.get(f"{API}/llm-tasks", headers=browser)).status_code == 401


async def test_login_refuses_wrong_passwords_forged_forms_and_open_redirects(
    client: httpx.AsyncClient,
) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", PASSWORD, Role.VIEWER)
    page = await client.get("/login")
    assert page.status_code == 200
    set_cookie = page.headers["set-cookie"].lower()
    assert "httponly" in set_cookie
    assert "samesite=lax" in set_cookie
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    form = {"Content-Type": "application/x-www-form-urlencoded"}

    wrong = await client.post(
        "/login", headers=form, content=f"username=ada&password=nope&csrf_token={token.group(1)}"
    )
    assert wrong.status_code == 401
    assert "Wrong user or password" in wrong.text
    client.cookies.clear()
    forged = await client.post(
        "/login", headers=form, content=f"username=ada&password={PASSWORD}&csrf_token=made-up"
    )
    assert forged.status_code == 403
    page = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    good = await client.post(
        "/login",
        headers=form,
        content=f"username=ada&password={PASSWORD.replace(' ', '+')}"
        f"&csrf_token={token.group(1)}&next=//evil.example/",
    )
    assert good.status_code == 303
    assert good.headers["location"] == "/"
    cookie = [h for h in good.headers.get_list("set-cookie") if h.startswith("bloom_session=")]
    assert "httponly" in cookie[0].lower()
    assert "samesite=lax" in cookie[0].lower()


async def test_passwords_are_stored_as_hashes(
    client: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", PASSWORD, Role.VIEWER)
    [row] = probe.rows(users.select())
    assert PASSWORD not in str(row)
    assert row["password"].startswith("scrypt$")
    with pytest.raises(Exception, match="at least 10"):
        await credentials.create_user("bob", "short", Role.VIEWER)


def test_the_policy_workers_touch_only_the_worker_protocol_and_viewers_only_read() -> None:
    """The rules themselves, stated again here: what a worker key reaches, and that viewers and
    anonymous callers change nothing."""
    for_workers = {route for route, access in RULES.items() if Role.WORKER in access.value}
    assert for_workers == {
        ("POST", f"{API}/workers"),
        ("GET", f"{API}/workers/{{worker_id}}"),  # its own: the install script's check
        ("POST", f"{API}/workers/{{worker_id}}/claim"),
        ("POST", f"{API}/workers/{{worker_id}}/complete"),
        ("GET", f"{API}/workers/{{worker_id}}/leases/{{lease_id}}"),  # a dispatched lease
        ("POST", f"{API}/llm-tasks/{{task_id}}/heartbeat"),
        ("POST", f"{API}/llm-tasks/{{task_id}}/complete"),
        ("POST", f"{API}/llm-tasks/{{task_id}}/events"),
        ("GET", f"{API}/llm-tasks/{{task_id}}/events"),
        ("GET", f"{API}/llm-tasks/{{task_id}}/workspace"),  # its own task's branch
        ("GET", f"{API}/llm-tasks/{{task_id}}/decisions"),  # its own task's approvals
        ("POST", f"{API}/llm-tasks/{{task_id}}/decisions"),  # a run takes them
    }
    for (method, path), access in RULES.items():
        if method != "GET" and access is not Access.ADMIN and Role.WORKER not in access.value:
            assert (method, path) in {
                ("POST", "/login"),
                ("POST", "/logout"),
                ("POST", f"{API}/test-connection"),
                ("POST", f"{API}/approvals/{{approval_id}}/decision"),  # approvers decide
                ("POST", "/approvals/{approval_id}/decision"),  # the dashboard's, the same
            }
    public = {route for route, access in RULES.items() if access is Access.PUBLIC}
    assert all(
        path.startswith(("/api/docs", "/api/openapi", "/docs/"))
        or path
        in {
            "/",
            "/login",
            "/logout",
            f"{API}/session",
            f"{API}/health",
            f"{API}/test-connection",
            "/api/membridge/health",
        }
        for _, path in public
    )


@pytest.mark.parametrize("trusted", [False, True])
async def test_the_session_cookie_is_secure_when_a_trusted_proxy_says_https(
    database_url: str, tmp_path: Path, trusted: bool
) -> None:
    """Behind a TLS-terminating proxy the connection is plain http; the proxy's
    X-Forwarded-Proto decides, and only when the proxy is trusted."""
    proxies = ["127.0.0.1"] if trusted else []
    settings = make_settings(database_url, tmp_path, trusted_proxies=proxies, api_key=ADMIN_KEY)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 4711))
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as http:
            await app.state.container.credentials.create_user("ada", PASSWORD, Role.VIEWER)
            https = {"X-Forwarded-Proto": "https"}
            page, done = await submit_login(http, "ada", PASSWORD, https)
            assert done.status_code == 303, done.text
            session = f"bloom_session={done.cookies['bloom_session']}"
            me = await http.get(f"{API}/session", headers=https | {"Cookie": session})
            csrf = {"X-CSRF-Token": me.json()["csrf_token"]}
            out = await http.post("/logout", headers=https | csrf | {"Cookie": session})
    assert out.status_code == 303, out.text
    set_cookies = [c.lower() for r in (page, done, out) for c in r.headers.get_list("set-cookie")]
    assert all(("; secure" in cookie) is trusted for cookie in set_cookies), set_cookies
    # Each deletion (the login form's token after login, the session at logout) carries the
    # attributes its cookie was set with, so that a browser honours it behind TLS.
    deletions = [c for c in set_cookies if "max-age=0" in c]
    assert {c.split("=", 1)[0] for c in deletions} == {"bloom_login_csrf", "bloom_session"}
    for deleted in deletions:
        name = deleted.split("=", 1)[0]
        made = next(c for c in set_cookies if c.startswith(f"{name}=") and c not in deletions)
        attributes = {a.strip() for a in made.split(";")[1:] if not a.strip().startswith("max")}
        assert attributes <= {a.strip() for a in deleted.split(";")[1:]}, (made, deleted)


async def test_a_key_header_needs_no_csrf_token_even_beside_a_login_cookie(
    client: httpx.AsyncClient,
) -> None:
    """The reference's React client sends its key and `credentials: include`: the key decides,
    and only a cookie login needs the CSRF token."""
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    await credentials.create_user("ada", PASSWORD, Role.ADMIN)
    browser = await log_in(client, "ada", PASSWORD)
    task = {"context_id": "c", "agent_slug": "default", "prompt": "p"}
    both = {"Cookie": browser["Cookie"], HEADER: ADMIN_KEY}
    assert (await client.post(f"{API}/llm-tasks", json=task, headers=both)).status_code == 201


async def test_a_workspace_history_is_read_by_its_own_worker_and_readers_only(
    client: httpx.AsyncClient,
) -> None:
    """It carries patches: a worker key reads it only for a task it holds (403 another's),
    viewers read it, nobody without a key; and only admins set a project's tool policy."""
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    admin = {HEADER: ADMIN_KEY}
    project = {"name": "demo", "repo_url": "https://git.example/demo.git"}
    assert (await client.post(f"{API}/projects", json=project, headers=admin)).status_code == 201
    caps = {"max_concurrency": 1, "workspaces": True}
    for name in ("wa", "wb"):
        body = {"name": name, "capabilities": caps}
        assert (await client.post(f"{API}/workers", json=body, headers=admin)).is_success
    own = {HEADER: (await credentials.create_key("a", Role.WORKER, "wa")).secret}
    other = {HEADER: (await credentials.create_key("b", Role.WORKER, "wb")).secret}
    viewer = {HEADER: (await credentials.create_key("v", Role.VIEWER)).secret}
    task = {"context_id": "c", "agent_slug": "p", "prompt": "p", "workspace": {"repo": "demo"}}
    task_id = (await client.post(f"{API}/llm-tasks", json=task, headers=admin)).json()["id"]
    claimed = await client.post(f"{API}/workers/wa/claim", json={"wait_seconds": 0}, headers=own)
    assert claimed.json()["task"]["id"] == task_id
    path = f"{API}/llm-tasks/{task_id}/workspace"
    assert (await client.get(path, headers=own)).status_code == 200
    assert (await client.get(path, headers=other)).status_code == 403
    assert (await client.get(path, headers=viewer)).status_code == 200
    assert (await client.get(path)).status_code == 401
    policy = {"deny": ["Bash"]}
    for who in (own, viewer):
        put = await client.put(f"{API}/tool-policies/p", json=policy, headers=who)
        assert put.status_code == 403
    assert (await client.put(f"{API}/tool-policies/p", json=policy, headers=admin)).is_success
