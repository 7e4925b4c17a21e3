"""Secrets at rest and in what the runtime shows: the Membridge admin key is stored sealed
(AES-GCM under the server's secret key), a key stored in plain text before is still read and
sealed in place, and neither the audit, the OpenAPI document nor the access log ever holds a
configured secret."""

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert, select
from structlog.testing import capture_logs

from bloom.runtime.app import create_app
from bloom.runtime.secret_box import PREFIX, SecretBox, SecretUnreadable
from bloom.runtime.secret_key import resolve_secret_key
from bloom.runtime.settings import RuntimeSettings
from bloom.runtime.storage.tables import audit_logs, runtime_settings
from tests.support.api import API
from tests.support.clock import FakeClock
from tests.support.databases import make_settings
from tests.support.db import DatabaseProbe

ADMIN_KEY = "mb-admin-0123456789-secret"
API_KEY = "rt-api-key-0123456789-secret"
SECRET_KEY = "server-secret-key-0123456789-abcdefghij"
ENV_ADMIN_KEY = "env-admin-key-0123456789-secret"
AUTH = {"X-Runtime-API-Key": API_KEY}


@pytest.fixture
def keyed_settings(database_url: str, tmp_path: Path) -> RuntimeSettings:
    return make_settings(
        database_url,
        tmp_path,
        api_key=API_KEY,
        secret_key=SECRET_KEY,
        membridge_admin_key=ENV_ADMIN_KEY,
        access_log=True,
        rate_limit_enabled=False,
    )


@pytest.fixture
async def http(
    keyed_settings: RuntimeSettings, clock: FakeClock
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(keyed_settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://runtime", headers=AUTH
        ) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def stored_admin_key(probe: DatabaseProbe) -> str:
    rows = probe.rows(select(runtime_settings).where(runtime_settings.c.key == "admin_key"))
    return str(rows[0]["value"])


async def credentials(http: httpx.AsyncClient) -> tuple[str, str]:
    """What the Membridge client will send: (URL, admin key)."""
    return await http.app.state.container.config.membridge_credentials()  # type: ignore[attr-defined, no-any-return]


async def test_the_admin_key_is_stored_sealed_and_used_in_clear(
    http: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    body = {"membridge_server_url": "http://membridge.local:8000", "admin_key": ADMIN_KEY}
    saved = await http.post(f"{API}/config", json=body)
    assert saved.status_code == 200, saved.text
    assert saved.json()["admin_key_masked"] == "mb-a****cret"
    raw = stored_admin_key(probe)
    assert raw.startswith(PREFIX)
    assert ADMIN_KEY not in raw
    assert ADMIN_KEY not in str(probe.rows(select(runtime_settings)))
    assert await credentials(http) == ("http://membridge.local:8000", ADMIN_KEY)
    # sealed again on every write: a fresh nonce, never the same text twice
    await http.post(f"{API}/config", json=body)
    assert stored_admin_key(probe) != raw


async def test_an_empty_key_keeps_the_stored_one_and_changes_the_url(
    http: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """The reference UI saves `{membridge_server_url, admin_key: ""}` when only the URL is typed."""
    body = {"membridge_server_url": "http://membridge.local:8000", "admin_key": ADMIN_KEY}
    assert (await http.post(f"{API}/config", json=body)).status_code == 200
    sealed = stored_admin_key(probe)
    moved = {"membridge_server_url": "http://elsewhere:8000", "admin_key": ""}
    saved = await http.post(f"{API}/config", json=moved)
    assert saved.status_code == 200, saved.text
    assert saved.json()["admin_key_masked"] == "mb-a****cret"
    assert stored_admin_key(probe) == sealed
    assert await credentials(http) == ("http://elsewhere:8000", ADMIN_KEY)


async def test_a_plain_text_key_from_before_is_read_then_sealed_in_place(
    http: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    with probe.engine.begin() as conn:
        conn.execute(insert(runtime_settings).values(key="admin_key", value="legacy-plain-key-99"))
    shown = (await http.get(f"{API}/config")).json()
    assert shown["admin_key_masked"] == "lega****y-99"
    raw = stored_admin_key(probe)
    assert raw.startswith(PREFIX)
    assert "legacy-plain-key-99" not in raw
    assert (await credentials(http))[1] == "legacy-plain-key-99"


async def test_a_key_sealed_under_another_secret_falls_back_to_the_environment(
    http: httpx.AsyncClient, probe: DatabaseProbe, tmp_path: Path
) -> None:
    """Another runtime with another secret key sealed it: no 500, the environment's key is used
    (and the problem is logged), until the key is saved again here."""
    foreign = SecretBox(b"another-secret").seal("foreign-admin-key", "admin_key")
    with probe.engine.begin() as conn:
        conn.execute(insert(runtime_settings).values(key="admin_key", value=foreign))
    with capture_logs() as logs:
        shown = await http.get(f"{API}/config")
    assert shown.status_code == 200
    assert shown.json()["admin_key_masked"] == "env-****cret"
    assert any(entry["event"] == "membridge_admin_key_unreadable" for entry in logs)
    assert (await credentials(http))[1] == ENV_ADMIN_KEY


def test_a_sealed_value_opens_only_with_its_key_and_for_its_purpose(tmp_path: Path) -> None:
    key = resolve_secret_key(None, tmp_path)
    assert resolve_secret_key(None, tmp_path) == key  # made once, kept in the data dir
    assert (tmp_path / "secret.key").stat().st_mode & 0o777 == 0o600
    box = SecretBox(key)
    sealed = box.seal("s3cret", "admin_key")
    assert box.open(sealed, "admin_key") == "s3cret"
    assert box.open("not sealed", "admin_key") == "not sealed"
    other = SecretBox(b"other")
    for opener, stored, purpose in [
        (other, sealed, "admin_key"),  # another secret key
        (box, sealed, "another_purpose"),  # moved to another row
        (box, sealed[:-4] + "AAAA", "admin_key"),  # damaged
        (box, PREFIX + "!!", "admin_key"),  # not base64
    ]:
        with pytest.raises(SecretUnreadable):
            opener.open(stored, purpose)


async def test_no_configured_secret_reaches_the_audit_the_openapi_document_or_the_log(
    http: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    secrets = [ADMIN_KEY, API_KEY, SECRET_KEY, ENV_ADMIN_KEY]
    with capture_logs() as logs:
        saved = await http.post(
            f"{API}/config",
            json={"membridge_server_url": "http://membridge.local:8000", "admin_key": ADMIN_KEY},
        )
        assert saved.status_code == 200
        await http.post(f"{API}/test-connection")
        created = await http.post(
            f"{API}/llm-tasks",
            json={"context_id": "c", "agent_slug": "a", "prompt": f"remember {ADMIN_KEY}"},
        )
        assert created.status_code == 201
        document = await http.get("/api/openapi.json")
        assert document.status_code == 200
    assert any(entry["event"] == "request" for entry in logs)  # the access log is on
    audit = probe.rows(select(audit_logs))
    assert {row["action"] for row in audit} >= {"config_updated", "task_created"}
    for secret in secrets:
        assert secret not in str(audit)
        assert secret not in document.text
        assert secret not in str(logs), "a request body (or a key) reached the log"
    # and the API itself shows the key masked only
    for path in ("/config", "/audit"):
        assert ADMIN_KEY not in (await http.get(f"{API}{path}")).text


async def test_a_url_with_credentials_is_refused(http: httpx.AsyncClient) -> None:
    """The URL is shown by GET /config and audited: a password in it would leak."""
    response = await http.post(
        f"{API}/config",
        json={"membridge_server_url": "http://user:pw-secret@membridge:8000", "admin_key": "k"},
    )
    assert response.status_code == 400
    assert "membridge_server_url" in response.json()["error"]["fieldErrors"]


async def test_the_default_key_is_never_stored(
    http: httpx.AsyncClient, probe: DatabaseProbe
) -> None:
    """The environment's key is used as it is, and only a key saved with POST /config is
    stored (sealed)."""
    assert (await http.get(f"{API}/config")).json()["admin_key_masked"] == "env-****cret"
    assert probe.rows(select(runtime_settings).where(runtime_settings.c.key == "admin_key")) == []
    assert (await credentials(http))[1] == ENV_ADMIN_KEY
