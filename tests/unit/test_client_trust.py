"""The runtime client checks an https runtime's certificate as httpx does by default, against
certifi's bundle; a client of plain-HTTP replicas does not load that bundle (20 ms of every
`bloom` command that calls the runtime)."""

import ssl
from typing import Any

import certifi
import pytest

from bloom.clients.runtime import RuntimeClient


@pytest.fixture
def bundles(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The CA files loaded into a TLS context from now on."""
    loaded: list[Any] = []
    load = ssl.SSLContext.load_verify_locations

    def spy(context: ssl.SSLContext, cafile: Any = None, *args: Any, **kwargs: Any) -> None:
        loaded.append(cafile)
        load(context, cafile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", spy)
    return loaded


async def test_an_https_replica_is_checked_against_certifi(
    bundles: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):  # which httpx would read instead
        monkeypatch.delenv(name, raising=False)
    async with RuntimeClient("http://a:5000, https://b"):
        pass
    assert bundles == [certifi.where()]


async def test_plain_http_replicas_load_no_bundle(bundles: list[Any]) -> None:
    async with RuntimeClient("http://a:5000,http://b:5000"):
        pass
    assert bundles == []
