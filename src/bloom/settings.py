"""Runtime settings from the environment.

Our own names carry the `BLOOM_` prefix; the seed deployment's names (`DATABASE_URL`, `PORT`,
`RUNTIME_API_KEY`, `MEMBRIDGE_SERVER_URL`, `MEMBRIDGE_ADMIN_KEY`, `NODE_ENV`) are accepted as
aliases, so the seed's env file runs us unchanged. Where both are set, the `BLOOM_` name wins.
"""

import ipaddress
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bloom.client_address import Network, parse_networks

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
RATE_LIMIT_STORAGES = ("memory", "redis", "rediss", "redis+unix")
S = TypeVar("S", bound="ServiceSettings")


def _env(name: str, *seed_names: str) -> AliasChoices:
    return AliasChoices(f"BLOOM_{name}", *seed_names)


def check_rate_limit_storage(url: str) -> str:
    """`memory://` or a Redis URL (`limits`' `async+` forms accepted too)."""
    scheme, separator, _ = url.partition("://")
    if not separator or scheme.lower().removeprefix("async+") not in RATE_LIMIT_STORAGES:
        raise ValueError("must be memory:// or a redis://, rediss:// or redis+unix:// URL")
    return url


class ServiceSettings(BaseSettings):
    """What every server of ours reads alike: logging. Empty values count as unset."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_ignore_empty=True)

    log_level: str = Field("info", validation_alias=_env("LOG_LEVEL"))
    log_format: Literal["json", "console"] = Field("json", validation_alias=_env("LOG_FORMAT"))
    access_log: bool = Field(True, validation_alias=_env("ACCESS_LOG"))
    trusted_proxies: Annotated[tuple[Network, ...], NoDecode] = Field(
        (),
        validation_alias=_env("TRUSTED_PROXIES"),
        description="Reverse proxies (addresses, CIDR blocks; JSON list or comma-separated) "
        "whose X-Forwarded-For is believed. Default: none, the peer is the client.",
    )

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: object) -> tuple[Network, ...]:
        return parse_networks(value)


class ServerSettings(ServiceSettings):
    """What both HTTP servers (runtime and Membridge) read alike: request and exposure limits."""

    max_body_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        validation_alias=_env("MAX_BODY_BYTES"),
        description="A larger request body is refused with 413, unread.",
    )
    insecure: bool = Field(
        False,
        validation_alias=_env("INSECURE"),
        description="Allow serving beyond loopback without an admin key (`--insecure`).",
    )
    https_redirect: bool = Field(
        False,
        validation_alias=_env("HTTPS_REDIRECT"),
        description="301 to https:// for requests a proxy marks `X-Forwarded-Proto: http`.",
    )


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; anything else (0.0.0.0, a name, an address) is not."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return bool(address.is_loopback)


class RuntimeSettings(ServerSettings):
    """Everything `bloom runtime serve` reads from its environment."""

    data_dir: Path = Field(Path(".bloom"), validation_alias=_env("DATA_DIR"))
    database_url: str | None = Field(
        None,
        validation_alias=_env("DATABASE_URL", "DATABASE_URL"),
        description="postgresql://… selects PostgreSQL; unset means SQLite under the data dir.",
    )
    host: str = Field("127.0.0.1", validation_alias=_env("HOST"))
    port: int = Field(5000, ge=1, le=65535, validation_alias=_env("PORT", "PORT"))
    api_key: SecretStr | None = Field(
        None,
        validation_alias=_env("API_KEY", "RUNTIME_API_KEY"),
        description="Shared admin key sent as X-Runtime-API-Key. Unset or empty: no auth.",
    )
    secret_key: SecretStr | None = Field(
        None,
        validation_alias=_env("SECRET_KEY"),
        description="Signs session cookies and encrypts stored secrets. Unset: a random key is "
        "made once and kept in <data dir>/secret.key (mode 0600).",
    )
    membridge_server_url: str = Field(
        "http://127.0.0.1:8000", validation_alias=_env("MEMBRIDGE_URL", "MEMBRIDGE_SERVER_URL")
    )
    membridge_admin_key: SecretStr = Field(
        SecretStr(""), validation_alias=_env("MEMBRIDGE_ADMIN_KEY", "MEMBRIDGE_ADMIN_KEY")
    )
    environment: str = Field("development", validation_alias=_env("ENV", "NODE_ENV"))

    lease_ttl_sec: int = Field(300, ge=5, le=86_400, validation_alias=_env("LEASE_TTL_SEC"))
    claim_ack_sec: int = Field(
        30,
        ge=1,
        validation_alias=_env("CLAIM_ACK_SEC"),
        description="A claimed lease lapses this soon unless its worker's first heartbeat arrives.",
    )
    claim_wait_sec: float = Field(25.0, ge=0, le=120, validation_alias=_env("CLAIM_WAIT_SEC"))
    claim_recheck_sec: float = Field(
        2.0,
        gt=0,
        validation_alias=_env("CLAIM_RECHECK_SEC"),
        description="Safety net for a waiting claim; wake-ups themselves are immediate.",
    )
    reaper_interval_sec: float = Field(30.0, gt=0, validation_alias=_env("REAPER_INTERVAL_SEC"))
    sticky_wait_sec: float = Field(30.0, ge=0, validation_alias=_env("STICKY_WAIT_SEC"))
    worker_live_sec: float = Field(60.0, gt=0, validation_alias=_env("WORKER_LIVE_SEC"))
    worker_sync_sec: float = Field(
        10.0, gt=0, validation_alias=_env("WORKER_SYNC_SEC"), description="Membridge agent sync."
    )
    membridge_retries: int = Field(3, ge=0, le=10, validation_alias=_env("MEMBRIDGE_RETRIES"))
    membridge_timeout_sec: float = Field(
        10.0, gt=0, le=120, validation_alias=_env("MEMBRIDGE_TIMEOUT_SEC")
    )
    retry_base_sec: float = Field(15.0, ge=0, validation_alias=_env("RETRY_BASE_SEC"))
    retry_max_sec: float = Field(600.0, ge=0, validation_alias=_env("RETRY_MAX_SEC"))

    artifact_store: Literal["db", "fs"] = Field("db", validation_alias=_env("ARTIFACT_STORE"))
    artifact_dir: Path | None = Field(None, validation_alias=_env("ARTIFACT_DIR"))

    migrate_on_start: bool = Field(True, validation_alias=_env("MIGRATE_ON_START"))
    db_pool_size: int = Field(10, ge=1, le=200, validation_alias=_env("DB_POOL_SIZE"))
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL"] = Field(
        "NORMAL", validation_alias=_env("SQLITE_SYNCHRONOUS")
    )

    rate_limit_enabled: bool = Field(True, validation_alias=_env("RATE_LIMIT_ENABLED"))
    rate_limit_api: int = Field(
        100,
        ge=1,
        validation_alias=_env("RATE_LIMIT_API"),
        description="Requests per minute per identity to /api/runtime/* and /api/membridge/*.",
    )
    rate_limit_test_connection: int = Field(
        20,
        ge=1,
        validation_alias=_env("RATE_LIMIT_TEST_CONNECTION"),
        description="POST /api/runtime/test-connection per minute, on top of the API budget.",
    )
    rate_limit_worker: int = Field(
        3000,
        ge=1,
        validation_alias=_env("RATE_LIMIT_WORKER"),
        description="Worker traffic per minute per identity, instead of the API budget.",
    )
    rate_limit_storage: str = Field(
        "memory://",
        validation_alias=_env("RATE_LIMIT_STORAGE"),
        description="memory:// (per process) or redis://… (shared by every process using it).",
    )
    rate_limit_key_prefix: str = Field(
        "bloom-runtime", min_length=1, validation_alias=_env("RATE_LIMIT_KEY_PREFIX")
    )

    @field_validator("rate_limit_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        return check_rate_limit_storage(value)

    @property
    def api_key_value(self) -> str:
        """The configured key, or "" when auth is off."""
        return self.api_key.get_secret_value() if self.api_key is not None else ""

    @property
    def resolved_artifact_dir(self) -> Path:
        return self.artifact_dir or self.data_dir / "artifacts"

    @property
    def open_to_network(self) -> bool:
        """No API key, and listening beyond this machine: anyone who reaches it may do anything."""
        return not self.api_key_value and not is_loopback(self.host)

    @property
    def serving_insecure(self) -> bool:
        """Open to the network because `--insecure` said so (health says it, too)."""
        return self.open_to_network and self.insecure

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without an API key, unless `--insecure`."""
        if self.open_to_network and not self.insecure:
            raise SettingsError(
                f"refusing to listen on {self.host} without an API key: set RUNTIME_API_KEY "
                "(or BLOOM_API_KEY), listen on 127.0.0.1, or pass --insecure "
                "(BLOOM_INSECURE=true) to serve every endpoint to anyone who can reach it"
            )


class SettingsError(ValueError):
    """The environment holds a value we cannot use; the message names the variable."""


def load_settings(kind: type[S], **overrides: object) -> S:
    """`kind` from the environment (and `overrides`), with errors fit for a person."""
    try:
        settings = kind()
    except ValidationError as exc:
        problems = [
            f"{_env_names(kind, str(e['loc'][0]))}: {e['msg']}" for e in exc.errors() if e["loc"]
        ]
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
    return settings.model_copy(update=overrides) if overrides else settings


def load_runtime_settings(**overrides: object) -> RuntimeSettings:
    return load_settings(RuntimeSettings, **overrides)


def _env_names(kind: type[BaseSettings], name: str) -> str:
    """All the environment names of the setting that `name` (one of them) belongs to."""
    for field in kind.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and name in alias.choices:
            return " or ".join(str(choice) for choice in alias.choices)
    return name
