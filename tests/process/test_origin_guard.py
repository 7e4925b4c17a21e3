"""Another site's page against real servers in open mode (`bloom up`'s: no key, loopback):
a rebinding Host is refused by both, a cross-site simple POST changes nothing, and the servers'
own pages and clients without an Origin act as before, over real connections."""

from pathlib import Path

import httpx

from tests.support.databases import fresh_sqlite_url
from tests.support.membridge import MembridgeProcess
from tests.support.server import RuntimeProcess

API = "/api/runtime"
TASK = {"context_id": "c", "agent_slug": "a", "prompt": "hello"}


def test_rebinding_and_cross_site_requests_against_real_servers(
    sqlite_template: Path, tmp_path: Path
) -> None:
    runtime = RuntimeProcess(fresh_sqlite_url(sqlite_template, tmp_path), tmp_path)
    membridge = MembridgeProcess(tmp_path / "membridge", admin_key=None, MEMBRIDGE_DEV="1")
    runtime.start()
    try:
        membridge.start()
        own = runtime.url  # http://127.0.0.1:<port>: what a page of this server sends
        with httpx.Client(base_url=runtime.url, timeout=10) as http:
            rebound = {"Host": f"evil.example:{runtime.port}"}
            refused = http.post(f"{API}/llm-tasks", json=TASK, headers=rebound)
            assert refused.status_code == 421
            assert "BLOOM_ALLOWED_HOSTS" in refused.json()["error"]
            assert http.get(f"{API}/llm-tasks").json() == []
            assert http.get(
                f"{API}/health", headers={"Host": f"localhost:{runtime.port}"}
            ).is_success

            first, second = (http.post(f"{API}/llm-tasks", json=TASK).json()["id"] for _ in "ab")
            cross = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
            cancel = http.post(f"{API}/llm-tasks/{first}/cancel", headers=cross)
            assert cancel.status_code == 403
            assert http.get(f"{API}/llm-tasks/{first}").json()["status"] == "queued"
            # the reference's client from this server's own origin: bodyless, no content type
            same = http.post(f"{API}/llm-tasks/{first}/cancel", headers={"Origin": own})
            assert same.status_code == 200, same.text
            assert http.post(f"{API}/llm-tasks/{second}/cancel").status_code == 200  # no Origin
            statuses = {task["status"] for task in http.get(f"{API}/llm-tasks").json()}
            assert statuses == {"cancelled"}
        with httpx.Client(base_url=membridge.url, timeout=10) as http:
            rebound = {"Host": f"evil.example:{membridge.port}"}
            assert http.get("/projects", headers=rebound).status_code == 421
            assert http.get("/projects").status_code == 200
    finally:
        membridge.stop()
        runtime.stop()
