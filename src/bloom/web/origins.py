"""What both servers refuse to another site's page, before any route runs.

- DNS rebinding. In open mode (no key: every caller acts as an admin) a request is answered only
  when its Host is a loopback name or address (`localhost`, `*.localhost`, 127.0.0.0/8, `::1`;
  any port) or a name of `BLOOM_ALLOWED_HOSTS`; else 421. A page whose own name a rebinding DNS
  points at 127.0.0.1 still sends that name as its Host, so it is never served. With keys the
  Host is not checked: such a page holds no key, and a login cookie is never sent to its name.
- Cross-site state changes, in every mode. A POST, PUT, PATCH or DELETE that a browser marks as
  sent by another site's page is 403, unless it carries what a page can only send after a CORS
  preflight, which neither server grants: a JSON content type, or one of the server's own
  headers (its key or CSRF header). The browser's mark is `Sec-Fetch-Site: cross-site` or
  `same-site`; without that header (older browsers), an `Origin` other than this server's own
  (its scheme's default port assumed when one side names none). Requests without either mark
  (curl, scripts, the CLI, workers) and the server's own pages are served as before.
"""

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from ipaddress import IPv6Address, ip_address
from urllib.parse import urlsplit

from bloom.web.listed import listed_items

ALLOWED_HOSTS = "BLOOM_ALLOWED_HOSTS"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_SITE = (
    "Cross-site request refused: another site's page may not change anything here (this "
    "server's own pages, JSON requests and clients that send no Origin are served)"
)
HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
AUTHORITY = re.compile(r"(?P<name>[^:\[\]]+|\[[0-9a-f:.]+\])(:(?P<port>[0-9]{1,5}))?")
DEFAULT_PORTS = {"http": 80, "https": 443}

Headers = Mapping[bytes, bytes]
Authority = tuple[str, int | None]


def host_name(text: str) -> str | None:
    """A host name or address in canonical form (lower case, no brackets, no final dot), or
    None when `text` is neither."""
    name = text.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
        try:
            return str(IPv6Address(name))
        except ValueError:
            return None
    name = name.removesuffix(".")
    if HOST_NAME.fullmatch(name):
        return name
    try:
        return str(ip_address(name))
    except ValueError:
        return None


def split_authority(value: bytes | None) -> Authority | None:
    """A Host header's name (as `host_name` gives it) and port, or None when it is not one."""
    if value is None:
        return None
    match = AUTHORITY.fullmatch(value.decode("latin-1").strip())
    if match is None:
        return None
    name = host_name(match["name"])
    port = match["port"]
    return (name, int(port) if port else None) if name is not None else None


def parse_host_names(value: object) -> tuple[str, ...]:
    """Allowed hosts from a setting: a JSON list or comma-separated text of host names and
    addresses, without ports. Raises ValueError naming a bad one."""
    names: list[str] = []
    for item in listed_items(value, "host names"):
        if not isinstance(item, str):
            raise ValueError(f"not a host name: {item!r}")
        if not item.strip():
            continue
        name = host_name(item)
        if name is None:
            raise ValueError(f"not a host name or address (no port, no scheme): {item.strip()!r}")
        names.append(name)
    return tuple(names)


@functools.lru_cache(maxsize=1024)  # a Host per request: parsing an address costs more
def is_loopback_name(name: str) -> bool:
    """`localhost`, a name under `.localhost`, or an address of 127.0.0.0/8 or `::1`."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class OriginPolicy:
    """One server's terms for browsers."""

    open_mode: str | None
    """How the server is open to every caller, as its Host refusal says it ("without
    RUNTIME_API_KEY"); None when it asks for keys, and then the Host is not checked."""
    allowed_hosts: Collection[str] = ()
    """Names served in open mode besides loopback, as `parse_host_names` gives them."""
    own_headers: Collection[bytes] = ()
    """The server's own request headers (lower case), which a page can send only after a CORS
    preflight: a request carrying one is never a cross-site simple request."""

    def misdirected(self, headers: Headers) -> str | None:
        """Why the request's Host is not served (open mode only), or None when it is."""
        if self.open_mode is None:
            return None
        authority = split_authority(headers.get(b"host"))
        if authority is not None and (
            is_loopback_name(authority[0]) or authority[0] in self.allowed_hosts
        ):
            return None
        what = (
            f"Host {authority[0]!r}" if authority is not None else "A request without a valid Host"
        )
        return (
            f"{what} is not served {self.open_mode}: only loopback names (localhost, "
            f"127.0.0.1, [::1]) and the names in {ALLOWED_HOSTS} are"
        )

    def cross_site_change(self, method: str, headers: Headers) -> bool:
        """A state change a browser marks as another site's, sent without a preflight."""
        if method not in UNSAFE_METHODS or self._preflighted(headers):
            return False
        site = headers.get(b"sec-fetch-site", b"").strip().lower()
        if site in (b"cross-site", b"same-site"):
            return True
        if site == b"same-origin":
            return False
        origin = headers.get(b"origin")
        return origin is not None and not _same_origin(origin, headers.get(b"host"))

    def _preflighted(self, headers: Headers) -> bool:
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        return content_type == b"application/json" or any(
            name in headers for name in self.own_headers
        )


def _same_origin(origin: bytes, host: bytes | None) -> bool:
    authority = split_authority(host)
    try:
        parts = urlsplit(origin.decode("latin-1").strip())
        port = parts.port
    except ValueError:
        return False
    default = DEFAULT_PORTS.get(parts.scheme.lower())
    if authority is None or default is None or parts.hostname is None:
        return False
    name, host_port = authority
    return host_name(parts.hostname) == name and (port or default) == (host_port or default)
