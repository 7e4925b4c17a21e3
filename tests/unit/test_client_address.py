"""Who the client is: the peer, or behind trusted proxies the right-most untrusted address of
X-Forwarded-For; and the scheme. Malformed headers never raise."""

from ipaddress import ip_network
from typing import Any

import pytest

from bloom.runtime.settings import RuntimeSettings, load_runtime_settings
from bloom.web.client_address import client_address, client_scheme, parse_networks
from bloom.web.settings import SettingsError

PROXIES = parse_networks("127.0.0.1, 10.0.0.0/8, ::1")


def scope(peer: str | None, *forwarded: bytes) -> dict[str, Any]:
    headers = [(b"x-forwarded-for", value) for value in forwarded]
    return {
        "type": "http",
        "client": (peer, 5000) if peer is not None else None,
        "headers": [(b"host", b"runtime"), *headers],
    }


def test_the_peer_is_the_client_without_trusted_proxies() -> None:
    assert client_address(scope("203.0.113.7", b"198.51.100.1"), ()) == "203.0.113.7"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored() -> None:
    assert client_address(scope("203.0.113.7", b"198.51.100.1"), PROXIES) == "203.0.113.7"


def test_from_a_trusted_proxy_the_right_most_untrusted_address_is_the_client() -> None:
    chain = b"1.1.1.1, 198.51.100.1, 10.1.2.3"  # the client's own claim, the client, a proxy
    assert client_address(scope("127.0.0.1", chain), PROXIES) == "198.51.100.1"


def test_several_headers_are_one_chain() -> None:
    got = client_address(scope("127.0.0.1", b"1.1.1.1", b"198.51.100.1, 10.0.0.9"), PROXIES)
    assert got == "198.51.100.1"


def test_a_chain_of_trusted_proxies_only_gives_its_first() -> None:
    assert client_address(scope("127.0.0.1", b"10.0.0.1, 10.0.0.2"), PROXIES) == "10.0.0.1"


def test_a_trusted_peer_without_the_header_is_the_client() -> None:
    assert client_address(scope("127.0.0.1"), PROXIES) == "127.0.0.1"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"", "127.0.0.1"),
        (b"garbage", "127.0.0.1"),
        (b",,,", "127.0.0.1"),
        (b"198.51.100.1, garbage", "127.0.0.1"),  # the walk ends at the first non-address
        (b"garbage, 198.51.100.1", "198.51.100.1"),
        (b"999.1.1.1", "127.0.0.1"),
        (b"198.51.100.1:4711", "198.51.100.1"),
        (b"[2001:db8::1]:4711", "2001:db8::1"),
        (b"2001:DB8:0:0::1", "2001:db8::1"),
        (b"::ffff:198.51.100.1", "198.51.100.1"),
        (b"[", "127.0.0.1"),
        (b"[]:80", "127.0.0.1"),
        (b"unknown", "127.0.0.1"),
        (b"\xff\xfe\x00 \xc3\xa9", "127.0.0.1"),
        (b"1" * 10_000, "127.0.0.1"),
        (b"1.1.1.1, " * 5_000 + b"1.1.1.1", "1.1.1.1"),
        (b"1.1.1.1," * 5_000, "127.0.0.1"),  # ends with an empty entry
        (b"10.0.0.5, garbage", "127.0.0.1"),
        (b"garbage, 10.0.0.5", "10.0.0.5"),  # only proxies reached: the last of them
    ],
)
def test_a_malformed_header_never_raises(header: bytes, expected: str) -> None:
    assert client_address(scope("127.0.0.1", header), PROXIES) == expected


def test_peers_are_given_canonically_and_odd_ones_as_they_are() -> None:
    assert client_address(scope("::ffff:127.0.0.1", b"198.51.100.1"), PROXIES) == "198.51.100.1"
    assert client_address(scope("testclient", b"198.51.100.1"), PROXIES) == "testclient"
    assert client_address(scope(None, b"198.51.100.1"), PROXIES) == "unknown"
    assert client_address({"type": "http"}, PROXIES) == "unknown"


@pytest.mark.parametrize(
    ("peer", "proto", "expected"),
    [
        ("127.0.0.1", b"https", "https"),
        ("127.0.0.1", b"HTTPS, http", "https"),  # the first proxy's word
        ("127.0.0.1", b"http", "http"),
        ("127.0.0.1", b"gopher", "http"),  # not a scheme we serve: the connection's own
        ("127.0.0.1", None, "http"),
        ("203.0.113.7", b"https", "http"),  # an untrusted peer's header is ignored
        (None, b"https", "http"),
    ],
)
def test_the_scheme_is_the_connections_or_a_trusted_proxys(
    peer: str | None, proto: bytes | None, expected: str
) -> None:
    request = scope(peer) | {"scheme": "http"}
    if proto is not None:
        request["headers"].append((b"x-forwarded-proto", proto))
    assert client_scheme(request, PROXIES) == expected
    assert client_scheme(request | {"scheme": "https"}, PROXIES) == (
        "https" if proto is None or peer != "127.0.0.1" or proto == b"gopher" else expected
    )


def test_trusted_proxies_in_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", "10.0.0.0/8, ::1")
    assert load_runtime_settings().trusted_proxies == (ip_network("10.0.0.0/8"), ip_network("::1"))
    monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", '["192.168.1.2", "fd00::/8"]')
    assert load_runtime_settings().trusted_proxies == (
        ip_network("192.168.1.2"),
        ip_network("fd00::/8"),
    )
    monkeypatch.delenv("BLOOM_TRUSTED_PROXIES")
    assert RuntimeSettings().trusted_proxies == ()
    for bad in ("10.0.0.1/8", "proxy.local", "[5]", "[1"):
        monkeypatch.setenv("BLOOM_TRUSTED_PROXIES", bad)
        with pytest.raises(SettingsError, match="BLOOM_TRUSTED_PROXIES"):
            load_runtime_settings()
