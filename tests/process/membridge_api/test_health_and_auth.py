"""Membridge over HTTP: health, the admin key, request ids, unknown paths and the access log."""

import httpx
import pytest

from tests.process.membridge_api.calls import ok, unique
from tests.support.membridge import (
    ADMIN_HEADER,
    ADMIN_KEY,
    MembridgeProcess,
)
from tests.support.stack import wait_for

UNAUTHORIZED = {"detail": "Unauthorized — invalid or missing X-MEMBRIDGE-ADMIN header"}


def test_health_is_public_and_counts_projects_and_agents(
    server: MembridgeProcess, http: httpx.Client
) -> None:
    manual = [p for p in ok(http.get("/projects")) if p["source"] == "manual"]
    agents = ok(http.get("/agents"))
    health = ok(httpx.get(f"{server.url}/health"))  # no key
    bloom_version = health.pop("bloom_version")
    assert isinstance(bloom_version, str)
    assert bloom_version
    assert health == {
        "status": "ok",
        "service": "membridge-control-plane",
        "version": "0.3.0",
        "projects": len(manual),
        "agents": len(agents),
    }  # no "auth": it is enabled


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param([], id="no header"),
        pytest.param([(b"x-membridge-admin", b"wrong-key")], id="wrong key"),
        pytest.param([(b"x-membridge-admin", b"")], id="empty"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY.encode() + b"4")], id="key plus one"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY[:-1].encode())], id="key minus one"),
        pytest.param([(b"x-membridge-admin", ADMIN_KEY.upper().encode())], id="upper case"),
        pytest.param([(b"x-membridge-admin", "clé-admin-ключ".encode())], id="non-ascii utf8"),
        pytest.param([(b"x-membridge-admin", b"\xff\xfe\xe9")], id="non-utf8 bytes"),
        pytest.param([(b"x-membridge-admin", b"k" * 10_000)], id="10k chars"),
        pytest.param([(b"x-runtime-api-key", ADMIN_KEY.encode())], id="another header"),
    ],
)
def test_without_the_right_key_every_guarded_path_is_401(
    server: MembridgeProcess, headers: list[tuple[bytes, bytes]]
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for method, path in [
            ("GET", "/agents"),
            ("POST", "/agents"),
            ("GET", "/projects"),
            ("DELETE", "/projects/x"),
            ("POST", "/agent/heartbeat"),
            ("GET", "/projects/abc/leadership"),
            ("POST", "/projects/abc/leadership/select"),
            ("GET", "/jobs"),
            ("GET", "/no/such/path"),
        ]:
            response = client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json() == UNAUTHORIZED
            assert response.headers["x-request-id"]


def test_the_right_key_opens_and_the_public_paths_need_none(server: MembridgeProcess) -> None:
    assert httpx.get(f"{server.url}/projects", headers={ADMIN_HEADER: ADMIN_KEY}).status_code == 200
    for path in ("/health", "/openapi.json", "/docs"):
        assert httpx.get(f"{server.url}{path}").status_code == 200, path
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["info"]["version"] == "0.3.0"
    assert "/agent/heartbeat" in spec["paths"]


def test_request_ids_are_echoed_or_made(server: MembridgeProcess, http: httpx.Client) -> None:
    given = http.get("/agents", headers={"X-Request-ID": "trace-42.a_b"})
    assert given.headers["x-request-id"] == "trace-42.a_b"
    made = http.get("/agents")
    assert len(made.headers["x-request-id"]) == 12
    refused = httpx.get(f"{server.url}/agents", headers={"X-Request-ID": "refused-1"})
    assert refused.status_code == 401
    assert refused.headers["x-request-id"] == "refused-1"
    unsafe = http.get("/agents", headers={"X-Request-ID": "a b<script>"})
    assert unsafe.headers["x-request-id"] != "a b<script>"


def test_unknown_paths_and_methods_answer_json(http: httpx.Client) -> None:
    missing = http.get("/no/such/path")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = http.put("/agents")
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})


def test_access_log_lines_are_json_without_bodies(
    server: MembridgeProcess, http: httpx.Client
) -> None:
    marker = unique("body-marker")
    ok(http.post("/projects", json={"name": marker}, headers={"X-Request-ID": marker}), 201)

    def logged() -> list[str]:
        return [line for line in server.log().splitlines() if f'"request_id": "{marker}"' in line]

    lines = wait_for(logged, 5, "the request's access line")  # written once the answer is sent
    assert len(lines) == 1
    assert '"path": "/projects"' in lines[0]
    assert '"status": 201' in lines[0]
    assert lines[0].count(marker) == 1  # the id only: the body is never logged
    assert ADMIN_KEY not in server.log()
