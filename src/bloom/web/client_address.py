"""Who is at the other end of a request: the peer's address, or, behind a trusted reverse proxy,
the address that proxy saw (from `X-Forwarded-For`); and the scheme the client used (behind a
trusted proxy, its `X-Forwarded-Proto`).

`X-Forwarded-For` is only believed when the peer itself is a trusted proxy
(`BLOOM_TRUSTED_PROXIES`); then the chain is read from the right, skipping the trusted proxies
that appended to it, and the first address that is not one of them is the client. Everything
left of it was written by the client and proves nothing. An entry that is not an address ends
the walk: the last address reached (a trusted proxy, or the peer) is the answer. Nothing here
raises on a malformed header. The servers run uvicorn without its own proxy-header handling
(which trusts 127.0.0.1 by default), so these functions are the only judges.
"""

import functools
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from starlette.types import Scope

from bloom.web.listed import listed_items

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address

FORWARDED_FOR = b"x-forwarded-for"
FORWARDED_PROTO = b"x-forwarded-proto"
UNKNOWN = "unknown"
MAX_ENTRY_CHARS = 64
"""Longer than any address with a port and a zone: not an address."""


def client_address(scope: Scope, trusted_proxies: Sequence[Network]) -> str:
    """The client's address (canonical text: `::ffff:1.2.3.4` is `1.2.3.4`), or the peer's as
    the server gave it when it is not an IP address, or "unknown" when there is no peer."""
    peer_text = _peer_text(scope)
    peer = _parse(peer_text)
    if peer is None:
        return peer_text or UNKNOWN
    if not trusted_proxies or not _trusted(peer, trusted_proxies):
        return str(peer)
    address = peer
    for entry in reversed(_forwarded_for(scope)):
        hop = _parse(entry)
        if hop is None:
            break
        address = hop
        if not _trusted(hop, trusted_proxies):
            break
    return str(address)


def client_scheme(scope: Scope, trusted_proxies: Sequence[Network]) -> str:
    """The scheme the client spoke, "https" or "http": the connection's own, or behind a
    trusted proxy the first value of its `X-Forwarded-Proto`."""
    scheme = str(scope.get("scheme", "http"))
    peer = _parse(_peer_text(scope))
    if peer is None or not _trusted(peer, trusted_proxies):
        return scheme
    values = _header_values(scope, FORWARDED_PROTO)
    forwarded = values[0].split(",")[0].strip().lower() if values else ""
    return forwarded if forwarded in ("http", "https") else scheme


def parse_networks(value: object) -> tuple[Network, ...]:
    """Trusted proxies from a setting: a JSON list or comma-separated text of addresses and
    CIDR blocks (`10.0.0.0/8`, `::1`), or a list of them. Raises ValueError naming a bad one."""
    networks: list[Network] = []
    for item in listed_items(value, "addresses or networks"):
        if isinstance(item, IPv4Network | IPv6Network):
            networks.append(item)
            continue
        if not isinstance(item, str):
            raise ValueError(f"not an address or network: {item!r}")
        if not item.strip():
            continue
        try:
            networks.append(ip_network(item.strip()))
        except ValueError as exc:
            raise ValueError(f"not an address or network: {item.strip()!r} ({exc})") from None
    return tuple(networks)


def _peer_text(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client and client[0] else ""


def _header_values(scope: Scope, name: bytes) -> list[str]:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers") or ()
    return [value.decode("latin-1") for key, value in headers if key == name]


def _forwarded_for(scope: Scope) -> list[str]:
    """Every X-Forwarded-For entry, in order (several such headers are one list)."""
    values = _header_values(scope, FORWARDED_FOR)
    return [entry.strip() for entry in ",".join(values).split(",")] if values else []


@functools.lru_cache(maxsize=1024)  # a peer per request: parsing an address costs more
def _parse(text: str) -> Address | None:
    """An address, with a port (`1.2.3.4:80`, `[::1]:80`) or brackets dropped; None if it is
    not one."""
    if not text or len(text) > MAX_ENTRY_CHARS:
        return None
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ip_address(text)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, trusted_proxies: Sequence[Network]) -> bool:
    return any(address in network for network in trusted_proxies)
