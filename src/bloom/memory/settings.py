"""Memory sync's settings, by the reference tool's names (REFERENCE_BEHAVIOUR.md §5.1), so an
existing node's `config.env` works unchanged: read from that file (`MEMBRIDGE_CONFIG_ENV`,
default `~/.claude-mem-minio/config.env`, when it exists), the environment winning over it."""

import os
import socket
from pathlib import Path

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import SettingsConfigDict

from bloom.objects.settings import ObjectStoreSettings
from bloom.web.settings import SettingsError

DEFAULT_CONFIG_ENV = "~/.claude-mem-minio/config.env"
DEFAULT_DB = "~/.claude-mem/claude-mem.db"
DEFAULT_BUCKET = "claude-memory"


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class MemorySettings(ObjectStoreSettings):
    """One node's view of one project's memory. The bucket: `BLOOM_MEMORY_BUCKET`, else the
    sync tool's `MINIO_BUCKET` (before the runtime's artifact names), default `claude-memory`."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_ignore_empty=True)

    s3_bucket: str = Field(
        DEFAULT_BUCKET,
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$",
        validation_alias=_env("BLOOM_MEMORY_BUCKET", "MINIO_BUCKET"),
    )

    project: str = Field("", max_length=128, validation_alias=_env("CLAUDE_PROJECT_ID"))
    db_path: Path = Field(Path(DEFAULT_DB), validation_alias=_env("CLAUDE_MEM_DB"))
    node_id: str = Field(
        default_factory=socket.gethostname, validation_alias=_env("MEMBRIDGE_NODE_ID")
    )
    primary_node_id: str = Field("", validation_alias=_env("PRIMARY_NODE_ID"))
    leadership_enabled: bool = Field(True, validation_alias=_env("LEADERSHIP_ENABLED"))
    lease_seconds: int = Field(
        3600, ge=10, le=30 * 86_400, validation_alias=_env("LEADERSHIP_LEASE_SECONDS")
    )
    allow_secondary_push: bool = Field(False, validation_alias=_env("ALLOW_SECONDARY_PUSH"))
    allow_primary_pull_override: bool = Field(
        False, validation_alias=_env("ALLOW_PRIMARY_PULL_OVERRIDE")
    )
    lock_ttl_seconds: int = Field(7200, ge=1, validation_alias=_env("LOCK_TTL_SECONDS"))
    stale_lock_grace_seconds: int = Field(
        60, ge=0, validation_alias=_env("STALE_LOCK_GRACE_SECONDS")
    )
    force_push: bool = Field(False, validation_alias=_env("FORCE_PUSH"))
    backup_max_days: int = Field(14, ge=0, validation_alias=_env("PULL_BACKUP_MAX_DAYS"))
    backup_max_count: int = Field(50, ge=1, validation_alias=_env("PULL_BACKUP_MAX_COUNT"))

    @property
    def db(self) -> Path:
        return Path(os.path.expandvars(str(self.db_path))).expanduser()

    @property
    def backup_dir(self) -> Path:
        return self.db.parent / "backups" / "pull-overwrite"

    def check(self) -> None:
        """Refuse, naming the variable, what the reference tool requires (§5.1)."""
        missing = [
            name
            for name, value in (
                ("MINIO_ENDPOINT", self.s3_endpoint),
                ("MINIO_ACCESS_KEY", self.s3_access_key.get_secret_value()),
                ("MINIO_SECRET_KEY", self.s3_secret_key.get_secret_value()),
                ("CLAUDE_PROJECT_ID", self.project),
            )
            if not value
        ]
        if missing:
            raise SettingsError(f"{', '.join(missing)} not set")


def read_config_env(path: Path) -> dict[str, str]:
    """A `config.env` (KEY=VALUE lines, `export` and quotes allowed, # comments)."""
    entries = {}
    for raw in path.read_text().splitlines():
        line = raw.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        entries[key.strip()] = value
    return entries


def load_memory_settings(project: str | None = None) -> MemorySettings:
    """The settings from `config.env` and the environment; `project` (`--project`) overrides
    `CLAUDE_PROJECT_ID`. Raises `SettingsError` with a message fit for a person."""
    environ = os.environ
    config = Path(environ.get("MEMBRIDGE_CONFIG_ENV") or DEFAULT_CONFIG_ENV).expanduser()
    try:
        from_file = read_config_env(config) if config.is_file() else {}
    except OSError as exc:
        raise SettingsError(f"cannot read {config}: {exc.strerror}") from None
    # The file's entries go in as init values, so the environment cannot lose to them: only
    # those the environment does not set are passed.
    given = {k: v for k, v in from_file.items() if not environ.get(k)}
    if project:
        given["CLAUDE_PROJECT_ID"] = project
    try:
        settings = MemorySettings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [f"{e['loc'][0]}: {e['msg']}" for e in exc.errors() if e["loc"]]
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
    return settings
