"""The runtime's persisted configuration: where Membridge is and the admin key to reach it."""

from dataclasses import dataclass

from bloom.domain.secrets import mask_secret
from bloom.services.clock import Clock
from bloom.storage.repositories import RuntimeDatabase

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
    """Stored values win over the environment's (the seed's startup priority)."""

    def __init__(
        self, db: RuntimeDatabase, clock: Clock, *, default_url: str, default_admin_key: str
    ):
        self.db = db
        self.clock = clock
        self.default_url = default_url
        self.default_admin_key = default_admin_key

    async def get(self) -> RuntimeConfig:
        async with self.db.read() as tx:
            stored = await tx.settings.all_values()
        last_test = stored.get(LAST_TEST_KEY)
        return RuntimeConfig(
            membridge_server_url=stored.get(URL_KEY, self.default_url),
            admin_key_masked=mask_secret(stored.get(ADMIN_KEY, self.default_admin_key)),
            connected=stored.get(CONNECTED_KEY) == "true",
            last_test=int(last_test) if last_test and last_test.isdigit() else None,
        )

    async def update(
        self, membridge_server_url: str, admin_key: str, actor: str = "admin"
    ) -> RuntimeConfig:
        now = self.clock()
        async with self.db.write() as tx:
            await tx.settings.put({URL_KEY: membridge_server_url, ADMIN_KEY: admin_key})
            await tx.audit.add(
                now,
                "config_updated",
                "runtime_config",
                "singleton",
                actor,
                f"Updated membridge URL to {membridge_server_url}",
            )
        return await self.get()
