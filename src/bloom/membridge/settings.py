"""Membridge settings from the environment.

Our names carry the `BLOOM_` prefix (`BLOOM_MEMBRIDGE_…` where the runtime has a setting of the
same kind); the reference deployment's names (`MEMBRIDGE_ADMIN_KEY`, `MEMBRIDGE_DEV`,
`MEMBRIDGE_DATA_DIR`) are accepted as aliases. Where both are set, the `BLOOM_` name wins. Empty
values count as unset.
"""

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator

from bloom.objects.settings import ObjectStoreSettings
from bloom.web.settings import (
    ServerSettings,
    SettingsError,
    check_rate_limit_storage,
    is_loopback,
    load_settings,
)

DEFAULT_DATABASE_NAME = "membridge.db"


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class MembridgeSettings(ServerSettings, ObjectStoreSettings):
    """Everything `bloom membridge serve` reads from its environment (logging, body limit and
    exposure: the base's; the object store, by the seeds' names, for the memory bucket)."""

    admin_key: SecretStr | None = Field(
        None,
        validation_alias=_env("BLOOM_MEMBRIDGE_ADMIN_KEY", "MEMBRIDGE_ADMIN_KEY"),
        description="Expected in the X-MEMBRIDGE-ADMIN header of every call but GET /health.",
    )
    dev: bool = Field(
        False,
        validation_alias=_env("BLOOM_MEMBRIDGE_DEV", "MEMBRIDGE_DEV"),
        description="Allows serving without an admin key (everything open). Development only.",
    )
    data_dir: Path = Field(
        Path(".bloom"), validation_alias=_env("BLOOM_DATA_DIR", "MEMBRIDGE_DATA_DIR")
    )
    database_url: str | None = Field(
        None,
        validation_alias=_env("BLOOM_MEMBRIDGE_DATABASE_URL"),
        description="postgresql://… selects PostgreSQL; unset means SQLite membridge.db there.",
    )
    host: str = Field("127.0.0.1", validation_alias=_env("BLOOM_MEMBRIDGE_HOST"))
    port: int = Field(8000, ge=1, le=65535, validation_alias=_env("BLOOM_MEMBRIDGE_PORT"))
    migrate_on_start: bool = Field(True, validation_alias=_env("BLOOM_MEMBRIDGE_MIGRATE_ON_START"))
    db_pool_size: int = Field(
        5, ge=1, le=100, validation_alias=_env("BLOOM_MEMBRIDGE_DB_POOL_SIZE")
    )
    memory_bucket: str = Field(
        "",
        pattern=r"^([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])?$",
        validation_alias=_env("BLOOM_MEMORY_BUCKET"),
        description="The nodes' memory bucket (their MINIO_BUCKET): with MINIO_ENDPOINT, a "
        "leadership select is written there as the lease the nodes obey.",
    )
    agent_key: SecretStr = Field(
        SecretStr(""),
        validation_alias=_env("BLOOM_AGENT_KEY", "MEMBRIDGE_AGENT_KEY"),
        description="The fleet's agent key, never sent: each node's agent is sent its own key, "
        "derived from it and the node's id (X-MEMBRIDGE-AGENT; `bloom node key NAME`).",
    )
    agent_timeout_sec: float = Field(
        180.0,
        gt=0,
        validation_alias=_env("BLOOM_MEMBRIDGE_AGENT_TIMEOUT_SEC"),
        description="How long a sync asked of an agent may take.",
    )
    rate_limit_enabled: bool = Field(
        True, validation_alias=_env("BLOOM_MEMBRIDGE_RATE_LIMIT_ENABLED")
    )
    rate_limit_admin: int = Field(
        3000,
        ge=1,
        validation_alias=_env("BLOOM_MEMBRIDGE_RATE_LIMIT_ADMIN"),
        description="Requests per minute with a valid admin key, all key holders together.",
    )
    rate_limit_api: int = Field(
        100,
        ge=1,
        validation_alias=_env("BLOOM_MEMBRIDGE_RATE_LIMIT_API"),
        description="Requests per minute per client address without a valid admin key.",
    )
    rate_limit_storage: str = Field(
        "memory://",
        validation_alias=_env("BLOOM_MEMBRIDGE_RATE_LIMIT_STORAGE"),
        description="memory:// (per process) or redis://… (shared by every process using it).",
    )
    rate_limit_key_prefix: str = Field(
        "bloom-membridge",
        min_length=1,
        validation_alias=_env("BLOOM_MEMBRIDGE_RATE_LIMIT_KEY_PREFIX"),
    )

    @field_validator("rate_limit_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        return check_rate_limit_storage(value)

    @property
    def writes_leases(self) -> bool:
        return self.s3_configured and bool(self.memory_bucket)

    @property
    def admin_key_value(self) -> str:
        """The configured key, or "" when none is."""
        return self.admin_key.get_secret_value() if self.admin_key is not None else ""

    @property
    def auth_disabled(self) -> bool:
        """No key, and dev mode says that is fine: every endpoint is open."""
        return not self.admin_key_value and self.dev

    @property
    def open_to_network(self) -> bool:
        """Auth disabled, and listening beyond this machine."""
        return self.auth_disabled and not is_loopback(self.host)

    @property
    def serving_insecure(self) -> bool:
        return self.open_to_network and self.insecure

    def check_auth(self) -> None:
        """Refuse to serve without a key unless dev mode allows it (never a 500 per request), and
        without a key beyond loopback unless `--insecure` says so too."""
        if not self.admin_key_value and not self.dev:
            raise SettingsError(
                "no admin key: set MEMBRIDGE_ADMIN_KEY (or BLOOM_MEMBRIDGE_ADMIN_KEY), "
                "or MEMBRIDGE_DEV=1 to serve without auth (development only)"
            )
        if self.open_to_network and not self.insecure:
            raise SettingsError(
                f"refusing to listen on {self.host} without an admin key (MEMBRIDGE_DEV): set "
                "MEMBRIDGE_ADMIN_KEY, listen on 127.0.0.1, or pass --insecure "
                "(BLOOM_INSECURE=true) to serve every endpoint to anyone who can reach it"
            )


def load_membridge_settings(**overrides: object) -> MembridgeSettings:
    return load_settings(MembridgeSettings, **overrides)
