"""Membridge settings from the environment.

Our names carry the `BLOOM_` prefix (`BLOOM_MEMBRIDGE_…` where the runtime has a setting of the
same kind); the reference deployment's names (`MEMBRIDGE_ADMIN_KEY`, `MEMBRIDGE_DEV`,
`MEMBRIDGE_DATA_DIR`) are accepted as aliases. Where both are set, the `BLOOM_` name wins. Empty
values count as unset.
"""

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bloom.settings import SettingsError

DEFAULT_DATABASE_NAME = "membridge.db"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class MembridgeSettings(BaseSettings):
    """Everything `bloom membridge serve` reads from its environment."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_ignore_empty=True)

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
    log_level: str = Field("info", validation_alias=_env("BLOOM_LOG_LEVEL"))
    log_format: Literal["json", "console"] = Field(
        "json", validation_alias=_env("BLOOM_LOG_FORMAT")
    )
    access_log: bool = Field(True, validation_alias=_env("BLOOM_ACCESS_LOG"))

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @property
    def admin_key_value(self) -> str:
        """The configured key, or "" when none is."""
        return self.admin_key.get_secret_value() if self.admin_key is not None else ""

    @property
    def auth_disabled(self) -> bool:
        """No key, and dev mode says that is fine: every endpoint is open."""
        return not self.admin_key_value and self.dev

    def check_auth(self) -> None:
        """Refuse to serve without a key unless dev mode allows it (never a 500 per request)."""
        if not self.admin_key_value and not self.dev:
            raise SettingsError(
                "no admin key: set MEMBRIDGE_ADMIN_KEY (or BLOOM_MEMBRIDGE_ADMIN_KEY), "
                "or MEMBRIDGE_DEV=1 to serve without auth (development only)"
            )


def load_membridge_settings(**overrides: object) -> MembridgeSettings:
    """Settings from the environment (and `overrides`), with errors fit for a person."""
    try:
        settings = MembridgeSettings()
    except ValidationError as exc:
        problems = [f"{_env_names(str(e['loc'][0]))}: {e['msg']}" for e in exc.errors() if e["loc"]]
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
    return settings.model_copy(update=overrides) if overrides else settings


def _env_names(name: str) -> str:
    """All the environment names of the setting that `name` (one of them) belongs to."""
    for field in MembridgeSettings.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and name in alias.choices:
            return " or ".join(str(choice) for choice in alias.choices)
    return name
