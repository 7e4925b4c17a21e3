"""The node install script: admins only; every query value matched against a strict pattern
(hostile ones answer 400 and no script); the script shellcheck-clean for awkward valid values;
no secret in it unless `with_key`, which makes a worker key that works; the env file written
mode 0600; each script served audited, never with its key."""

import re
import subprocess
from pathlib import Path

import httpx
import pytest

from bloom.domain.fleet import node_agent_key
from bloom.domain.identity import Role
from bloom.runtime.app import create_app
from bloom.runtime.settings import RuntimeSettings
from tests.support.access import ADMIN_KEY, HEADER
from tests.support.api import API
from tests.support.databases import make_settings
from tests.support.nginx import tool

SCRIPT = f"{API}/agent-install-script"
ADMIN = {HEADER: ADMIN_KEY}
PUBLIC_URL = "https://bloom.example.org"
REPO_URL = "https://git.example.org/bloom/bloom-runtime.git"
AGENT_KEY = "agent'key\"$(reboot)`x`"
"""The runtime's agent key, as awkward as a configured secret may be."""
MEMBRIDGE_KEY = "membridge-admin-key-0123456789"
HOSTILE = [
    "a;reboot",
    "$(reboot)",
    "`reboot`",
    "a'b",
    'a"b',
    "a\nb",
    "a b",
    "../etc",
    "https://x.org/../etc",
    "nœud",
    "https://bloom.example.org/" + "a" * 600,
    "n" * 200,
    "https://user@x.org/",
    "https://x.org/?q=$(reboot)",
]
AWKWARD = [
    {"node_id": "n.1_a:b@c-D"},
    {
        "node_id": "9",
        "server_url": "http://10.0.0.5:5000/bloom~x/",
        "repo_url": "http://git.local/a_b/c-d.git",
        "port": "1",
    },
    {"node_id": "pi-kitchen", "with_key": "true", "port": "65535"},
]


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(
        database_url,
        tmp_path,
        api_key=ADMIN_KEY,
        public_url=PUBLIC_URL + "/",
        install_repo_url=REPO_URL,
        agent_key=AGENT_KEY,
        membridge_admin_key=MEMBRIDGE_KEY,
    )


async def install_entries(client: httpx.AsyncClient) -> list[dict[str, str]]:
    entries = (await client.get(f"{API}/audit", params={"limit": 100}, headers=ADMIN)).json()
    return [e for e in entries if e["action"] == "install_script_served"]


async def test_only_admins_get_the_script(client: httpx.AsyncClient) -> None:
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    viewer = (await credentials.create_key("v", Role.VIEWER)).secret
    worker = (await credentials.create_key("w", Role.WORKER, "n1")).secret
    params = {"node_id": "n1"}
    assert (await client.get(SCRIPT, params=params)).status_code == 401
    for key in (viewer, worker):
        assert (await client.get(SCRIPT, params=params, headers={HEADER: key})).status_code == 403
    served = await client.get(SCRIPT, params=params, headers=ADMIN)
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/plain")
    assert served.text.startswith("#!/bin/sh\n")
    assert len(await install_entries(client)) == 1


async def test_hostile_values_answer_400_and_no_script(client: httpx.AsyncClient) -> None:
    for name in ("node_id", "server_url", "repo_url", "port", "with_key"):
        for value in HOSTILE:
            reply = await client.get(SCRIPT, params={name: value}, headers=ADMIN)
            assert reply.status_code == 400, (name, value, reply.text)
            assert list(reply.json()["error"]["fieldErrors"]) == [name], (name, value)
    refused = await client.get(SCRIPT, params={"with_key": "true"}, headers=ADMIN)
    assert refused.status_code == 400
    assert "node_id" in refused.json()["error"]
    assert await install_entries(client) == []


async def test_without_a_public_url_the_admin_is_told_to_set_one(
    database_url: str, tmp_path: Path
) -> None:
    # a Host open mode serves (BLOOM_ALLOWED_HOSTS), yet never taken for the runtime's address
    settings = make_settings(
        database_url, tmp_path, install_repo_url=REPO_URL, allowed_hosts=("evil.example",)
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://evil.example") as http:
            reply = await http.get(SCRIPT, params={"node_id": "n1"})
            assert reply.status_code == 409
            assert "BLOOM_PUBLIC_URL" in reply.json()["error"]
            given = await http.get(
                SCRIPT, params={"node_id": "n1", "server_url": "https://rt.example.org"}
            )
            assert "RUNTIME_URL=https://rt.example.org\n" in given.text
            assert "evil.example" not in given.text


async def test_no_secret_unless_asked_and_the_env_file_is_private(
    client: httpx.AsyncClient,
) -> None:
    text = (await client.get(SCRIPT, params={"node_id": "n1"}, headers=ADMIN)).text
    for secret in (ADMIN_KEY, AGENT_KEY, MEMBRIDGE_KEY, "bloom_worker_"):
        assert secret not in text
    assert f"RUNTIME_URL={PUBLIC_URL}\n" in text
    assert f"REPO_URL={REPO_URL}\n" in text
    assert "NODE_ID=n1\n" in text
    assert 'WORKER_KEY="${BLOOM_WORKER_API_KEY:-}"' in text
    assert "bloom key create --role worker --worker $NODE_ID" in text
    env_section = text[text.index("umask 077") : text.index('mv "$ENV_FILE.new" "$ENV_FILE"')]
    assert 'chmod 600 "$ENV_FILE.new"' in env_section
    assert 'chown 0:0 "$ENV_FILE.new"' in env_section  # root's, not the worker user's
    credentials = client.app.state.container.credentials  # type: ignore[attr-defined]
    assert await credentials.keys() == []
    default = (await client.get(SCRIPT, headers=ADMIN)).text
    assert 'NODE_ID="$(hostname)"' in default


async def test_with_key_embeds_a_working_worker_key_audited_without_it(
    client: httpx.AsyncClient,
) -> None:
    text = (await client.get(SCRIPT, params={"node_id": "n1", "with_key": "1"}, headers=ADMIN)).text
    found = re.search(r"^WORKER_KEY=(bloom_worker_[A-Za-z0-9_-]+)$", text, re.MULTILINE)
    assert found is not None
    key = {HEADER: found.group(1)}
    # the node's own agent key, never the fleet's (which opens every node)
    assert f"AGENT_KEY={node_agent_key(AGENT_KEY, 'n1')}\n" in text
    assert AGENT_KEY not in text
    assert (await client.get(f"{API}/workers/n1", headers=key)).status_code == 404
    registered = await client.post(f"{API}/workers", json={"name": "n1"}, headers=key)
    assert registered.status_code == 201
    assert (await client.get(f"{API}/workers/n1", headers=key)).status_code == 200
    assert (await client.get(f"{API}/workers/n2", headers=key)).status_code == 403
    assert (await client.get(SCRIPT, headers=key)).status_code == 403
    [entry] = await install_entries(client)
    assert (entry["entity_id"], entry["actor"]) == ("n1", "admin")
    assert "new worker key" in entry["detail"]
    assert found.group(1) not in str(entry)


async def test_the_script_is_shellcheck_clean_for_awkward_values(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    shellcheck = tool("shellcheck")
    scripts = []
    for number, params in enumerate(AWKWARD):
        reply = await client.get(SCRIPT, params=params, headers=ADMIN)
        assert reply.status_code == 200, reply.text
        script = tmp_path / f"install-{number}.sh"
        script.write_text(reply.text)
        subprocess.run(["sh", "-n", str(script)], check=True)
        scripts.append(str(script))
    checked = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", *scripts], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout
