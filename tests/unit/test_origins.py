"""The browser rules' parts (`bloom.web.origins`): Host headers, `BLOOM_ALLOWED_HOSTS`, and what
counts as this server's own origin."""

import pytest

from bloom.membridge.settings import load_membridge_settings
from bloom.runtime.settings import load_runtime_settings
from bloom.web.origins import OriginPolicy, split_authority
from bloom.web.settings import SettingsError


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (b"Bloom.LAN.:5000", ("bloom.lan", 5000)),
        (b"[::1]:80", ("::1", 80)),
        (b"[0:0::1]", ("::1", None)),
        (b"127.0.0.1", ("127.0.0.1", None)),
        (b"::1", None),
        (b"a/b", None),
        (b"a:b", None),
        (b"", None),
        (None, None),
    ],
)
def test_host_headers(host: bytes | None, expected: tuple[str, int | None] | None) -> None:
    assert split_authority(host) == expected


def test_allowed_hosts_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOOM_ALLOWED_HOSTS", " Bloom.lan, 10.0.0.7,[fd00::7],, ")
    assert load_runtime_settings().allowed_hosts == ("bloom.lan", "10.0.0.7", "fd00::7")
    assert load_membridge_settings().allowed_hosts == ("bloom.lan", "10.0.0.7", "fd00::7")
    monkeypatch.setenv("BLOOM_ALLOWED_HOSTS", '["bloom.lan"]')
    assert load_runtime_settings().allowed_hosts == ("bloom.lan",)
    for bad in ("bloom.lan:5000", "http://bloom.lan", "*"):
        monkeypatch.setenv("BLOOM_ALLOWED_HOSTS", bad)
        with pytest.raises(SettingsError, match="BLOOM_ALLOWED_HOSTS"):
            load_runtime_settings()


@pytest.mark.parametrize(
    ("origin", "host", "cross"),
    [
        (b"http://localhost:5000", b"localhost:5000", False),
        (b"https://bloom.lan", b"bloom.lan:443", False),  # default ports on either side
        (b"http://bloom.lan:80", b"bloom.lan", False),
        (b"http://[::1]:5000", b"[::1]:5000", False),
        (b"http://localhost:5001", b"localhost:5000", True),
        (b"https://bloom.lan", b"bloom.lan", False),  # behind TLS: the scheme is the proxy's
        (b"http://bloom.lan", b"bloom.lan:8080", True),
        (b"null", b"localhost:5000", True),
        (b"file://", b"localhost:5000", True),
        (b"http://localhost:99999", b"localhost:5000", True),
        (b"http://localhost:5000", None, True),
    ],
)
def test_own_origin(origin: bytes, host: bytes | None, cross: bool) -> None:
    headers = {b"origin": origin} | ({b"host": host} if host is not None else {})
    assert OriginPolicy(open_mode=None).cross_site_change("POST", headers) is cross


def test_only_state_changes_without_a_preflight_are_judged() -> None:
    policy = OriginPolicy(open_mode=None, own_headers=(b"x-key",))
    cross = {b"host": b"localhost", b"sec-fetch-site": b"cross-site"}
    assert not policy.cross_site_change("GET", cross)
    assert policy.cross_site_change("DELETE", cross)
    assert not policy.cross_site_change("POST", cross | {b"x-key": b""})
    assert not policy.cross_site_change("POST", cross | {b"content-type": b"Application/JSON; x"})
    assert policy.cross_site_change("POST", cross | {b"content-type": b"text/plain;x=json"})
    # the browser's own mark wins over an Origin a proxy's Host rewrite made look foreign
    same = {b"host": b"bloom.lan", b"origin": b"https://bloom.lan:8443"}
    assert policy.cross_site_change("POST", same)
    assert not policy.cross_site_change("POST", same | {b"sec-fetch-site": b"same-origin"})
