"""Settings every process of ours reads alike (logging, proxies; for servers, body limit and
exposure), and loading any settings from the environment with errors fit for a person.

Our own names carry the `BLOOM_` prefix; a seed deployment's names are accepted as aliases, so
its env file runs us unchanged. Where both are set, the `BLOOM_` name wins.
"""

import ipaddress
from typing import Annotated, Literal, TypeVar

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from bloom.web.client_address import Network, parse_networks
from bloom.web.origins import parse_host_names

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
RATE_LIMIT_STORAGES = ("memory", "redis", "rediss", "redis+unix")
S = TypeVar("S", bound="ServiceSettings")


def bloom_env(name: str, *seed_names: str) -> AliasChoices:
    return AliasChoices(f"BLOOM_{name}", *seed_names)


def check_rate_limit_storage(url: str) -> str:
    """`memory://` or a Redis URL (`limits`' `async+` forms accepted too)."""
    scheme, separator, _ = url.partition("://")
    if not separator or scheme.lower().removeprefix("async+") not in RATE_LIMIT_STORAGES:
        raise ValueError("must be memory:// or a redis://, rediss:// or redis+unix:// URL")
    return url


class OwnNamesEnv(EnvSettingsSource):
    """The environment, read by each setting's own names only.

    Settings are made by field name in code (`populate_by_name`), and pydantic-settings would
    then also read a variable named like the field: Membridge's `port` from `PORT` (the runtime's,
    in the seeds' shared env file), its `database_url` from `DATABASE_URL` (the runtime's
    database), the worker's `name` from `NAME`. The names in each field's alias are the only ones.
    """

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls)
        self.config = {**self.config, "populate_by_name": False, "validate_by_name": False}


class OwnNamesOnly(BaseSettings):
    """Settings read from the environment by their `BLOOM_…` names and the seeds' aliases only."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, OwnNamesEnv(settings_cls))


class ServiceSettings(OwnNamesOnly):
    """What every server of ours reads alike: logging. Empty values count as unset."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_ignore_empty=True)

    log_level: str = Field("info", validation_alias=bloom_env("LOG_LEVEL"))
    log_format: Literal["auto", "json", "console"] = Field(
        "auto",
        validation_alias=bloom_env("LOG_FORMAT"),
        description="json lines, console for people, auto: console on a terminal, else json.",
    )
    access_log: bool = Field(True, validation_alias=bloom_env("ACCESS_LOG"))
    trusted_proxies: Annotated[tuple[Network, ...], NoDecode] = Field(
        (),
        validation_alias=bloom_env("TRUSTED_PROXIES"),
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


class ListenerSettings(ServiceSettings):
    """What every process of ours that listens (the servers, a worker's agent surface) reads
    alike: the body limit, whether it may listen beyond loopback without its key, the Host
    names it answers without one, and whether its metrics are public."""

    max_body_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        validation_alias=bloom_env("MAX_BODY_BYTES"),
        description="A larger request body is refused with 413, unread.",
    )
    insecure: bool = Field(
        False,
        validation_alias=bloom_env("INSECURE"),
        description="Allow serving beyond loopback without a key (`--insecure`).",
    )
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=bloom_env("ALLOWED_HOSTS"),
        description="Without a key, Host names (or addresses; JSON list or comma-separated) "
        "served besides loopback; any other Host is refused (DNS rebinding).",
    )
    metrics_public: bool = Field(
        False,
        validation_alias=bloom_env("METRICS_PUBLIC"),
        description="Serve /metrics without credentials even when an API key is set.",
    )

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_names(cls, value: object) -> tuple[str, ...]:
        return parse_host_names(value)


class ServerSettings(ListenerSettings):
    """What both HTTP servers (runtime and Membridge) read alike: request and exposure limits."""

    https_redirect: bool = Field(
        False,
        validation_alias=bloom_env("HTTPS_REDIRECT"),
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


def _env_names(kind: type[BaseSettings], name: str) -> str:
    """All the environment names of the setting that `name` (one of them) belongs to."""
    for field in kind.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and name in alias.choices:
            return " or ".join(str(choice) for choice in alias.choices)
    return name
