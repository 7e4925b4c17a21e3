"""Runtime settings from the environment (seed names and BLOOM_ names), and database URLs."""

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from bloom.db.database import DatabaseUrlError, StorageKind, resolve_database
from bloom.runtime.settings import RuntimeSettings

SEED_NAMES = [
    "DATABASE_URL",
    "PORT",
    "RUNTIME_API_KEY",
    "MEMBRIDGE_SERVER_URL",
    "MEMBRIDGE_ADMIN_KEY",
    "NODE_ENV",
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment that sets none of the runtime's variables."""
    for name in list(os.environ):
        if name.startswith("BLOOM_") or name in SEED_NAMES:
            monkeypatch.delenv(name)


def test_defaults() -> None:
    """With nothing set: port 5000 on loopback, data under .bloom, SQLite (no URL), no auth,
    the seed's Membridge default, lease TTL 300 s, claim ack 30 s, reaper every 30 s."""
    settings = RuntimeSettings()
    assert settings.port == 5000
    assert settings.host == "127.0.0.1"
    assert settings.data_dir == Path(".bloom")
    assert settings.database_url is None
    assert settings.api_key is None
    assert settings.api_key_value == ""
    assert settings.membridge_server_url == "http://127.0.0.1:8000"
    assert settings.membridge_admin_key.get_secret_value() == ""
    assert settings.environment == "development"
    assert settings.lease_ttl_sec == 300
    assert settings.claim_ack_sec == 30
    assert settings.reaper_interval_sec == 30.0
    assert settings.worker_live_sec == 60.0
    assert settings.retry_base_sec == 15.0
    assert settings.resolved_artifact_dir == Path(".bloom") / "artifacts"


SEED_ALIASES = [
    ("DATABASE_URL", "postgresql://u:p@db:5432/bloom", "database_url"),
    ("PORT", "5123", "port"),
    ("RUNTIME_API_KEY", "seed-runtime-key", "api_key_value"),
    ("MEMBRIDGE_SERVER_URL", "http://membridge:8000", "membridge_server_url"),
    ("MEMBRIDGE_ADMIN_KEY", "seed-admin-key", "membridge_admin_key"),
    ("NODE_ENV", "production", "environment"),
]


def value_of(settings: RuntimeSettings, attribute: str) -> object:
    value = getattr(settings, attribute)
    return value.get_secret_value() if hasattr(value, "get_secret_value") else value


@pytest.mark.parametrize(("name", "value", "attribute"), SEED_ALIASES)
def test_seed_names_are_accepted(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, attribute: str
) -> None:
    """The seed's /etc/bloom-runtime.env variable names configure us unchanged."""
    monkeypatch.setenv(name, value)
    expected: object = int(value) if attribute == "port" else value
    assert value_of(RuntimeSettings(), attribute) == expected


BLOOM_OVER_SEED = [
    (
        "BLOOM_DATABASE_URL",
        "DATABASE_URL",
        "sqlite:///ours.db",
        "sqlite:///seed.db",
        "database_url",
    ),
    ("BLOOM_PORT", "PORT", "6001", "6002", "port"),
    ("BLOOM_API_KEY", "RUNTIME_API_KEY", "ours-key", "seed-key", "api_key_value"),
    (
        "BLOOM_MEMBRIDGE_URL",
        "MEMBRIDGE_SERVER_URL",
        "http://ours:8000",
        "http://seed:8000",
        "membridge_server_url",
    ),
    (
        "BLOOM_MEMBRIDGE_ADMIN_KEY",
        "MEMBRIDGE_ADMIN_KEY",
        "ours-admin",
        "seed-admin",
        "membridge_admin_key",
    ),
    ("BLOOM_ENV", "NODE_ENV", "staging", "production", "environment"),
]


@pytest.mark.parametrize(("ours", "seed", "our_value", "seed_value", "attribute"), BLOOM_OVER_SEED)
def test_bloom_names_work_and_win_over_seed_names(
    monkeypatch: pytest.MonkeyPatch,
    ours: str,
    seed: str,
    our_value: str,
    seed_value: str,
    attribute: str,
) -> None:
    """A BLOOM_ name works on its own, and wins when the seed name is set as well."""
    expected: object = int(our_value) if attribute == "port" else our_value
    monkeypatch.setenv(ours, our_value)
    assert value_of(RuntimeSettings(), attribute) == expected
    monkeypatch.setenv(seed, seed_value)
    assert value_of(RuntimeSettings(), attribute) == expected


def test_bloom_only_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings without a seed name are read from their BLOOM_ names."""
    monkeypatch.setenv("BLOOM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("BLOOM_HOST", "0.0.0.0")
    monkeypatch.setenv("BLOOM_LEASE_TTL_SEC", "42")
    monkeypatch.setenv("BLOOM_CLAIM_ACK_SEC", "7")
    monkeypatch.setenv("BLOOM_REAPER_INTERVAL_SEC", "2.5")
    settings = RuntimeSettings()
    assert settings.data_dir == tmp_path
    assert settings.host == "0.0.0.0"
    assert settings.lease_ttl_sec == 42
    assert settings.claim_ack_sec == 7
    assert settings.reaper_interval_sec == 2.5
    assert settings.resolved_artifact_dir == tmp_path / "artifacts"


def test_empty_runtime_api_key_means_auth_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the seed, RUNTIME_API_KEY set to "" disables auth, like leaving it unset."""
    monkeypatch.setenv("RUNTIME_API_KEY", "")
    assert RuntimeSettings().api_key_value == ""


def test_secrets_do_not_show_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Printing or logging the settings never reveals the keys."""
    monkeypatch.setenv("RUNTIME_API_KEY", "runtime-secret-value")
    monkeypatch.setenv("MEMBRIDGE_ADMIN_KEY", "admin-secret-value")
    shown = repr(RuntimeSettings()) + str(RuntimeSettings())
    assert "runtime-secret-value" not in shown
    assert "admin-secret-value" not in shown


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PORT", "0"),
        ("PORT", "70000"),
        ("PORT", "http"),
        ("BLOOM_LEASE_TTL_SEC", "1"),
        ("BLOOM_REAPER_INTERVAL_SEC", "0"),
    ],
)
def test_out_of_range_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """A bad port or interval stops startup with a validation error instead of misbehaving."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        RuntimeSettings()


# resolve_database


@pytest.mark.parametrize(
    "url",
    [
        "postgres://bloom:pw@db.example:5433/runtime",
        "postgresql://bloom:pw@db.example:5433/runtime",
        "postgresql+psycopg://bloom:pw@db.example:5433/runtime",
    ],
)
def test_postgresql_urls(url: str, tmp_path: Path) -> None:
    """Every spelling of a PostgreSQL URL (incl. Heroku-style postgres://) selects PostgreSQL
    (asyncpg for the server, psycopg for migrations), keeps host, port, user, password and
    database, and hides the password when displayed."""
    target = resolve_database(url, tmp_path)
    assert target.kind is StorageKind.POSTGRESQL
    assert target.url.drivername == "postgresql"
    assert target.sync_url.drivername == "postgresql+psycopg"
    assert target.dsn == "postgresql://bloom:pw@db.example:5433/runtime"
    for engine_url in (target.url, target.sync_url):
        assert (engine_url.host, engine_url.port, engine_url.database) == (
            "db.example",
            5433,
            "runtime",
        )
        assert (engine_url.username, engine_url.password) == ("bloom", "pw")
    assert "pw" not in target.display
    assert target.display.startswith("postgresql://bloom:***@db.example:5433/runtime")


def test_sqlite_url_with_a_path(tmp_path: Path) -> None:
    """sqlite:///path: the server opens the file itself, migrations use pysqlite; the file's
    directory is created."""
    path = tmp_path / "nested" / "dir" / "bloom.db"
    target = resolve_database(f"sqlite:///{path}", tmp_path / "unused")
    assert target.kind is StorageKind.SQLITE
    assert target.sync_url.drivername == "sqlite+pysqlite"
    assert target.dsn == str(path)
    assert target.sync_url.database == str(path)
    assert path.parent.is_dir()
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize("url", [None, ""])
def test_no_url_means_sqlite_under_the_data_dir(url: str | None, tmp_path: Path) -> None:
    """No database URL: SQLite at <data dir>/runtime.db (absolute), the data dir created."""
    data_dir = tmp_path / "data"
    target = resolve_database(url, data_dir)
    assert target.kind is StorageKind.SQLITE
    assert target.dsn == str((data_dir / "runtime.db").resolve())
    assert data_dir.is_dir()
    other = resolve_database(None, data_dir, default_name="membridge.db")
    assert other.sync_url.database == str((data_dir / "membridge.db").resolve())


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("mysql://root@localhost/bloom", "mysql"),
        ("mssql+pyodbc://sa@server/bloom", "mssql+pyodbc"),
        ("oracle://scott:tiger@host/db", "oracle"),
    ],
)
def test_unsupported_scheme_is_a_clear_error(url: str, scheme: str, tmp_path: Path) -> None:
    """Another database's URL is refused with a message naming the scheme and what works."""
    with pytest.raises(DatabaseUrlError) as raised:
        resolve_database(url, tmp_path)
    message = str(raised.value)
    assert f"Unsupported database URL scheme '{scheme}'" in message
    assert "postgresql://" in message
    assert "sqlite:///" in message
    assert "tiger" not in message


@pytest.mark.parametrize("url", ["not a url", "://nothing", "postgresql://host:port/db"])
def test_malformed_url_is_a_clear_error(url: str, tmp_path: Path) -> None:
    """A URL that does not parse is a DatabaseUrlError (a ValueError), not a crash elsewhere."""
    with pytest.raises(DatabaseUrlError, match="database URL"):
        resolve_database(url, tmp_path)
