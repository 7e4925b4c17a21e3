"""Runtime settings from the environment.

Our own names carry the `BLOOM_` prefix; the seed deployment's names (`DATABASE_URL`, `PORT`,
`RUNTIME_API_KEY`, `MEMBRIDGE_SERVER_URL`, `MEMBRIDGE_ADMIN_KEY`, `NODE_ENV`) are accepted as
aliases, so the seed's env file runs us unchanged. Where both are set, the `BLOOM_` name wins.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from bloom.domain.models import MAX_CLAIM_WAIT_SEC
from bloom.domain.stall import DEFAULT_STALL_SEC, MAX_STALL_SEC, MIN_STALL_SEC, stall_sec_problem
from bloom.objects.settings import ObjectStoreSettings
from bloom.web.settings import (
    ServerSettings,
    SettingsError,
    bloom_env,
    check_rate_limit_storage,
    is_loopback,
    load_settings,
)


class RuntimeSettings(ServerSettings, ObjectStoreSettings):
    """Everything `bloom runtime serve` reads from its environment."""

    data_dir: Path = Field(Path(".bloom"), validation_alias=bloom_env("DATA_DIR"))
    database_url: str | None = Field(
        None,
        validation_alias=bloom_env("DATABASE_URL", "DATABASE_URL"),
        description="postgresql://… selects PostgreSQL; unset means SQLite under the data dir.",
    )
    host: str = Field("127.0.0.1", validation_alias=bloom_env("HOST"))
    port: int = Field(5000, ge=1, le=65535, validation_alias=bloom_env("PORT", "PORT"))
    api_key: SecretStr | None = Field(
        None,
        validation_alias=bloom_env("API_KEY", "RUNTIME_API_KEY"),
        description="Shared admin key sent as X-Runtime-API-Key. Unset or empty: no auth.",
    )
    secret_key: SecretStr | None = Field(
        None,
        validation_alias=bloom_env("SECRET_KEY"),
        description="Signs session cookies and encrypts stored secrets. Unset: a random key is "
        "made once and kept in <data dir>/secret.key (mode 0600).",
    )
    membridge_server_url: str = Field(
        "http://127.0.0.1:8000", validation_alias=bloom_env("MEMBRIDGE_URL", "MEMBRIDGE_SERVER_URL")
    )
    membridge_admin_key: SecretStr = Field(
        SecretStr(""), validation_alias=bloom_env("MEMBRIDGE_ADMIN_KEY", "MEMBRIDGE_ADMIN_KEY")
    )
    environment: str = Field("development", validation_alias=bloom_env("ENV", "NODE_ENV"))
    public_url: str | None = Field(
        None,
        validation_alias=bloom_env("PUBLIC_URL"),
        description="The runtime's base URL as nodes reach it: the callback address a dispatched "
        "task carries to its agent. Unset: http://<host>:<port>.",
    )
    agent_key: SecretStr = Field(
        SecretStr(""),
        validation_alias=bloom_env("AGENT_KEY", "MEMBRIDGE_AGENT_KEY"),
        description="The fleet's agent key, never sent: each node's agent is sent its own key, "
        "derived from it and the node's id (X-MEMBRIDGE-AGENT; `bloom node key NAME`).",
    )
    install_repo_url: str | None = Field(
        None,
        validation_alias=bloom_env("INSTALL_REPO_URL"),
        description="The git repository the node install script clones (an http(s) URL; the "
        "script's `repo_url` query overrides it). Unset: the script must be given `repo_url`.",
    )
    dispatch_accept_sec: float = Field(
        5.0,
        gt=0,
        le=60,
        validation_alias=bloom_env("DISPATCH_ACCEPT_SEC"),
        description="How long a dispatch waits for the agent to take the task before answering; "
        "an agent still working by then has accepted it.",
    )

    lease_ttl_sec: int = Field(300, ge=5, le=86_400, validation_alias=bloom_env("LEASE_TTL_SEC"))
    claim_ack_sec: int = Field(
        30,
        ge=1,
        validation_alias=bloom_env("CLAIM_ACK_SEC"),
        description="A claimed lease lapses this soon unless its worker's first heartbeat arrives.",
    )
    claim_wait_sec: float = Field(
        25.0, ge=0, le=MAX_CLAIM_WAIT_SEC, validation_alias=bloom_env("CLAIM_WAIT_SEC")
    )
    claim_recheck_sec: float = Field(
        2.0,
        gt=0,
        validation_alias=bloom_env("CLAIM_RECHECK_SEC"),
        description="How often the process looks for work no wake-up announced (one read for "
        "all its waiting claims), and a waiting claim checks its caller is still there.",
    )
    reaper_interval_sec: float = Field(
        30.0, gt=0, validation_alias=bloom_env("REAPER_INTERVAL_SEC")
    )
    stall_sec: int = Field(
        DEFAULT_STALL_SEC,
        ge=0,
        le=MAX_STALL_SEC,
        validation_alias=bloom_env("STALL_SEC"),
        description="A running task's CLI printing nothing for longer is stalled (shown, "
        "counted, audited; retried under its policy's on_stall: retry), unless its policy's "
        f"stall_sec says otherwise; 0 or {MIN_STALL_SEC}..{MAX_STALL_SEC}, 0 turns it off.",
    )
    sticky_wait_sec: float = Field(30.0, ge=0, validation_alias=bloom_env("STICKY_WAIT_SEC"))
    worker_live_sec: float = Field(60.0, gt=0, validation_alias=bloom_env("WORKER_LIVE_SEC"))
    worker_sync_sec: float = Field(
        10.0,
        gt=0,
        validation_alias=bloom_env("WORKER_SYNC_SEC"),
        description="Membridge agent sync.",
    )
    membridge_retries: int = Field(3, ge=0, le=10, validation_alias=bloom_env("MEMBRIDGE_RETRIES"))
    membridge_timeout_sec: float = Field(
        10.0, gt=0, le=120, validation_alias=bloom_env("MEMBRIDGE_TIMEOUT_SEC")
    )
    retry_base_sec: float = Field(15.0, ge=0, validation_alias=bloom_env("RETRY_BASE_SEC"))
    retry_max_sec: float = Field(600.0, ge=0, validation_alias=bloom_env("RETRY_MAX_SEC"))

    artifact_store: Literal["db", "fs", "s3"] = Field(
        "db",
        validation_alias=bloom_env("ARTIFACT_STORE"),
        description="db (in the row, as the seed), fs (files) or s3 (MINIO_* / BLOOM_S3_*).",
    )
    artifact_dir: Path | None = Field(None, validation_alias=bloom_env("ARTIFACT_DIR"))

    approvals_webhook_url: str | None = Field(
        None,
        validation_alias=bloom_env("APPROVALS_WEBHOOK_URL"),
        description="POST each approval asked for here (JSON, signed with "
        "BLOOM_APPROVALS_WEBHOOK_SECRET), retried with backoff; docs/approvals.md.",
    )
    approvals_webhook_secret: SecretStr = Field(
        SecretStr(""), validation_alias=bloom_env("APPROVALS_WEBHOOK_SECRET")
    )
    approvals_webhook_allow_private: bool = Field(
        False,
        validation_alias=bloom_env("APPROVALS_WEBHOOK_ALLOW_PRIVATE"),
        description="Let the webhook reach loopback and private addresses (refused by default).",
    )

    audit_export: bool | None = Field(
        None,
        validation_alias=bloom_env("AUDIT_EXPORT"),
        description="Export the audit log to the S3 bucket; unset: when MINIO_ENDPOINT is set.",
    )
    audit_export_interval_sec: float = Field(
        300.0, ge=1, validation_alias=bloom_env("AUDIT_EXPORT_INTERVAL_SEC")
    )
    audit_export_rows: int = Field(
        10_000, ge=1, le=1_000_000, validation_alias=bloom_env("AUDIT_EXPORT_ROWS")
    )
    audit_export_settle_sec: float = Field(
        60.0, ge=0, validation_alias=bloom_env("AUDIT_EXPORT_SETTLE_SEC")
    )
    audit_retention_days: float = Field(0, ge=0, validation_alias=bloom_env("AUDIT_RETENTION_DAYS"))

    events_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=4096,
        validation_alias=bloom_env("EVENTS_MAX_BYTES"),
        description="A task's live output stored at most (types and data, UTF-8 bytes); later "
        "events are dropped, with one `truncated` event saying so. The run goes on.",
    )
    events_retention_days: float = Field(
        30,
        ge=0,
        validation_alias=bloom_env("EVENTS_RETENTION_DAYS"),
        description="Events of ended tasks older than this are deleted (hourly); 0 keeps them.",
    )
    event_streams_per_caller: int = Field(
        8,
        ge=1,
        validation_alias=bloom_env("EVENT_STREAMS_PER_CALLER"),
        description="Event streams (GET …/events) one caller follows at once, per process; "
        "beyond it 429 with Retry-After.",
    )

    migrate_on_start: bool = Field(True, validation_alias=bloom_env("MIGRATE_ON_START"))
    db_pool_size: int = Field(10, ge=1, le=200, validation_alias=bloom_env("DB_POOL_SIZE"))
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL"] = Field(
        "NORMAL", validation_alias=bloom_env("SQLITE_SYNCHRONOUS")
    )

    rate_limit_enabled: bool = Field(True, validation_alias=bloom_env("RATE_LIMIT_ENABLED"))
    rate_limit_api: int = Field(
        100,
        ge=1,
        validation_alias=bloom_env("RATE_LIMIT_API"),
        description="Requests per minute per identity to /api/runtime/* and /api/membridge/*.",
    )
    rate_limit_test_connection: int = Field(
        20,
        ge=1,
        validation_alias=bloom_env("RATE_LIMIT_TEST_CONNECTION"),
        description="POST /api/runtime/test-connection per minute, on top of the API budget.",
    )
    rate_limit_worker: int = Field(
        3000,
        ge=1,
        validation_alias=bloom_env("RATE_LIMIT_WORKER"),
        description="Worker traffic per minute per identity, instead of the API budget.",
    )
    rate_limit_anonymous: int = Field(
        60,
        ge=1,
        validation_alias=bloom_env("RATE_LIMIT_ANONYMOUS"),
        description="Requests per minute per client address without valid credentials (none, "
        "or a wrong key or login), instead of the API and worker budgets; counted before any "
        "body is read.",
    )
    rate_limit_storage: str = Field(
        "memory://",
        validation_alias=bloom_env("RATE_LIMIT_STORAGE"),
        description="memory:// (per process) or redis://… (shared by every process using it).",
    )
    rate_limit_key_prefix: str = Field(
        "bloom-runtime", min_length=1, validation_alias=bloom_env("RATE_LIMIT_KEY_PREFIX")
    )

    login_max_failures: int = Field(
        5,
        ge=1,
        validation_alias=bloom_env("LOGIN_MAX_FAILURES"),
        description="Failed logins for one user name (known or not) before it is locked out.",
    )
    login_max_failures_per_address: int = Field(
        20,
        ge=1,
        validation_alias=bloom_env("LOGIN_MAX_FAILURES_PER_ADDRESS"),
        description="Failed logins from one client address before it is locked out.",
    )
    login_lockout_sec: int = Field(
        2,
        ge=1,
        validation_alias=bloom_env("LOGIN_LOCKOUT_SEC"),
        description="The first lockout; each further failure doubles it.",
    )
    login_lockout_max_sec: int = Field(
        900, ge=1, validation_alias=bloom_env("LOGIN_LOCKOUT_MAX_SEC")
    )
    login_failure_window_sec: int = Field(
        3600,
        ge=1,
        validation_alias=bloom_env("LOGIN_FAILURE_WINDOW_SEC"),
        description="Failed logins are counted for this long from the first (a success "
        "forgets a user name's).",
    )
    password_hash_threads: int = Field(
        2,
        ge=1,
        le=64,
        validation_alias=bloom_env("PASSWORD_HASH_THREADS"),
        description="Password checks (scrypt, ~40 ms of CPU each) run in at most this many "
        "threads at a time, off the event loop; more wait their turn.",
    )

    @field_validator("stall_sec")
    @classmethod
    def _stall_sec(cls, value: int) -> int:
        problem = stall_sec_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("rate_limit_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        return check_rate_limit_storage(value)

    @model_validator(mode="after")
    def _s3_needs_endpoint(self) -> "RuntimeSettings":
        if self.artifact_store == "s3" and not self.s3_configured:
            raise ValueError("BLOOM_ARTIFACT_STORE=s3 needs MINIO_ENDPOINT (or BLOOM_S3_ENDPOINT)")
        if self.audit_export and not self.s3_configured:
            raise ValueError("BLOOM_AUDIT_EXPORT=true needs MINIO_ENDPOINT (or BLOOM_S3_ENDPOINT)")
        return self

    @property
    def exports_audit(self) -> bool:
        return self.s3_configured if self.audit_export is None else self.audit_export

    @property
    def api_key_value(self) -> str:
        """The configured key, or "" when auth is off."""
        return self.api_key.get_secret_value() if self.api_key is not None else ""

    @property
    def resolved_artifact_dir(self) -> Path:
        return self.artifact_dir or self.data_dir / "artifacts"

    @property
    def open_to_network(self) -> bool:
        """No API key, and reachable from beyond this machine (listening beyond loopback, or
        behind a reverse proxy, which forwards whoever reaches it): anyone may do anything."""
        return not self.api_key_value and (not is_loopback(self.host) or self.behind_proxy)

    @property
    def behind_proxy(self) -> bool:
        """Trusted reverse proxies are configured: requests arrive from wherever they serve."""
        return bool(self.trusted_proxies)

    @property
    def serving_insecure(self) -> bool:
        """Open to the network because `--insecure` said so (health says it, too)."""
        return self.open_to_network and self.insecure

    @property
    def callback_url(self) -> str:
        """Where a node's agent reports a dispatched task (never the caller's Host header)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback, or to serve a reverse proxy, without an API key,
        unless `--insecure`."""
        if not self.open_to_network or self.insecure:
            return
        if not is_loopback(self.host):
            raise SettingsError(
                f"refusing to listen on {self.host} without an API key: set RUNTIME_API_KEY "
                "(or BLOOM_API_KEY), listen on 127.0.0.1, or pass --insecure "
                "(BLOOM_INSECURE=true) to serve every endpoint to anyone who can reach it"
            )
        raise SettingsError(
            "refusing to serve behind a reverse proxy (BLOOM_TRUSTED_PROXIES) without an API "
            "key: set RUNTIME_API_KEY (or BLOOM_API_KEY), or pass --insecure "
            "(BLOOM_INSECURE=true) to serve every endpoint to anyone who reaches the proxy"
        )


def load_runtime_settings(**overrides: object) -> RuntimeSettings:
    return load_settings(RuntimeSettings, **overrides)
