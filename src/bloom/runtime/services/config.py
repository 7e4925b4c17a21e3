"""The runtime's persisted configuration: where Membridge is and the admin key to reach it.

The admin key is stored sealed (`bloom.runtime.secret_box`: AES-GCM under the server's secret
key). A key stored in plain text by an older version is still read, and sealed in place the
first time it is read (compare-and-set, so a newer key saved meanwhile is never overwritten).
"""

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import structlog

from bloom.clients.membridge import ConnectionState
from bloom.domain.audit import AuditAction, config_audit
from bloom.domain.clock import Clock
from bloom.domain.secrets import mask_secret
from bloom.runtime.secret_box import SecretBox, SecretUnreadable, is_sealed
from bloom.runtime.storage.repositories import RuntimeDatabase

log = structlog.get_logger(__name__)

URL_KEY = "membridge_server_url"
ADMIN_KEY = "admin_key"
CONNECTED_KEY = "connected"
LAST_TEST_KEY = "last_test"


@dataclass(slots=True)
class RuntimeConfig:
    """The seed's `RuntimeConfig`: the admin key only ever leaves masked."""

    membridge_server_url: str
    admin_key_masked: str
    connected: bool
    last_test: int | None


class ConfigService:
    """Stored values win over the environment's (the seed's startup priority). `connection`,
    when given, is the live state of this process's Membridge client: it decides `connected`
    and `last_test` once the client has talked to Membridge."""

    def __init__(
        self,
        db: RuntimeDatabase,
        clock: Clock,
        *,
        box: SecretBox,
        default_url: str,
        default_admin_key: str,
        connection: Callable[[], ConnectionState] | None = None,
    ):
        self.db = db
        self.clock = clock
        self.box = box
        self.default_url = default_url
        self.default_admin_key = default_admin_key
        self.connection = connection

    async def _stored(self) -> tuple[dict[str, str], str]:
        """The stored settings, and the admin key in clear (stored, else the default)."""
        async with self.db.read() as tx:
            stored = await tx.settings.all_values()
        sealed = stored.get(ADMIN_KEY)
        if sealed is None:
            return stored, self.default_admin_key
        if not is_sealed(sealed):
            await self._seal_in_place(sealed)
        try:
            return stored, self.box.open(sealed, ADMIN_KEY)
        except SecretUnreadable as exc:
            log.error("membridge_admin_key_unreadable", error=str(exc), using="the default")
            return stored, self.default_admin_key

    async def _seal_in_place(self, plain: str) -> None:
        async with self.db.write() as tx:
            await tx.settings.swap(ADMIN_KEY, plain, self.box.seal(plain, ADMIN_KEY))

    async def get(self) -> RuntimeConfig:
        stored, admin_key = await self._stored()
        last_test = stored.get(LAST_TEST_KEY)
        config = RuntimeConfig(
            membridge_server_url=stored.get(URL_KEY, self.default_url),
            admin_key_masked=mask_secret(admin_key),
            connected=stored.get(CONNECTED_KEY) == "true",
            last_test=int(last_test) if last_test and last_test.isdigit() else None,
        )
        live = self.connection() if self.connection is not None else None
        if live is not None and (live.lastSuccess is not None or live.consecutiveFailures):
            config.connected = live.connected
            config.last_test = live.lastSuccess or config.last_test
        return config

    async def membridge_credentials(self) -> tuple[str, str]:
        """(URL, admin key) for the Membridge client, read fresh: the operator may change them."""
        stored, admin_key = await self._stored()
        return stored.get(URL_KEY, self.default_url), admin_key

    async def record_connection(self, connected: bool) -> None:
        """Persist the outcome of a connection test (`connected`, and when it last succeeded)."""
        values = {CONNECTED_KEY: "true" if connected else "false"}
        if connected:
            values[LAST_TEST_KEY] = str(self.clock())
        async with self.db.write() as tx:
            await tx.settings.put(values)

    async def update(
        self, membridge_server_url: str, admin_key: str, actor: str | None = None
    ) -> RuntimeConfig:
        now = self.clock()
        values = {URL_KEY: membridge_server_url}
        if admin_key:  # empty: the stored key stays (the reference's form sends "" unless typed)
            values[ADMIN_KEY] = self.box.seal(admin_key, ADMIN_KEY)
        async with self.db.write() as tx:
            await tx.settings.put(values)
            await tx.audit.add(
                config_audit(
                    AuditAction.CONFIG_UPDATED,
                    now=now,
                    actor=actor or "admin",
                    detail=f"Updated membridge URL to {without_credentials(membridge_server_url)}",
                )
            )
        return await self.get()


def without_credentials(url: str) -> str:
    """The URL with any user and password taken out (they never reach a log or the audit)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
