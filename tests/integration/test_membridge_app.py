"""The app factory in-process: it is never built without a key unless dev mode says so, a
configured key is enforced even in dev mode, and an unexpected failure is a JSON 500 that
carries the request id and no stack trace."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from bloom.membridge.app import create_app
from bloom.web.settings import SettingsError
from tests.support.membridge import membridge_settings


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://membridge") as http:
            yield http


def test_no_key_and_no_dev_mode_builds_no_app(tmp_path: Path) -> None:
    settings = membridge_settings(f"sqlite:///{tmp_path / 'm.db'}", tmp_path, dev=False)
    with pytest.raises(SettingsError, match="no admin key"):
        create_app(settings)


async def test_a_configured_key_is_enforced_even_in_dev_mode(
    membridge_db_url: str, tmp_path: Path
) -> None:
    settings = membridge_settings(membridge_db_url, tmp_path, dev=True, admin_key="k-123")
    async with serving(create_app(settings)) as http:
        assert (await http.get("/agents")).status_code == 401
        assert (await http.get("/agents", headers={"X-MEMBRIDGE-ADMIN": "k-123"})).json() == []
        health = (await http.get("/health")).json()
        assert "auth" not in health


async def test_an_unexpected_failure_is_a_json_500_with_the_request_id(tmp_path: Path) -> None:
    """A database without Membridge's tables (never migrated): every query fails for real."""
    settings = membridge_settings(f"sqlite:///{tmp_path / 'unmigrated.db'}", tmp_path)
    async with serving(create_app(settings)) as http:
        response = await http.get("/agents", headers={"X-Request-ID": "broken-1"})
        assert response.status_code == 500
        assert response.json() == {"detail": "Internal server error"}
        assert response.headers["x-request-id"] == "broken-1"
        assert "Traceback" not in response.text
