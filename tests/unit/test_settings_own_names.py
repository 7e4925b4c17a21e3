"""Settings are read by their own environment names only, never by a variable named like the
Python field: in the seeds' shared env file `PORT` and `DATABASE_URL` are the runtime's, not
Membridge's `port` and `database_url`."""

from pathlib import Path

import pytest

from bloom.membridge.settings import MembridgeSettings
from bloom.runtime.settings import RuntimeSettings
from bloom.worker.settings import WorkerSettings

FIELD_NAMED = {
    "PORT": "5000",
    "HOST": "0.0.0.0",
    "DATABASE_URL": "postgresql://bloom@127.0.0.1/runtime",
    "DATA_DIR": "/elsewhere",
    "SECRET_KEY": "from-a-variable-named-like-the-field",
    "API_KEY": "from-a-variable-named-like-the-field",
    "NAME": "from-a-variable-named-like-the-field",
    "ADMIN_KEY": "from-a-variable-named-like-the-field",
    "S3_BUCKET": "field-named-bucket",
    "LOG_LEVEL": "debug",
}


@pytest.fixture
def field_named_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FIELD_NAMED.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("field_named_env")
def test_membridge_takes_nothing_from_the_runtimes_names() -> None:
    membridge = MembridgeSettings()
    assert (membridge.port, membridge.host, membridge.database_url) == (8000, "127.0.0.1", None)
    assert membridge.admin_key is None
    assert membridge.data_dir == Path(".bloom")
    assert membridge.log_level == "info"


@pytest.mark.usefixtures("field_named_env")
def test_the_runtime_and_the_worker_read_their_own_names_only() -> None:
    runtime = RuntimeSettings()
    assert runtime.port == 5000  # PORT and DATABASE_URL are the seeds' names: its aliases
    assert runtime.database_url == "postgresql://bloom@127.0.0.1/runtime"
    assert (runtime.host, runtime.secret_key, runtime.api_key) == ("127.0.0.1", None, None)
    assert (runtime.data_dir, runtime.s3_bucket) == (Path(".bloom"), "bloom-artifacts")
    worker = WorkerSettings()
    assert worker.name != FIELD_NAMED["NAME"]
    assert worker.api_key is None


def test_code_still_makes_settings_by_field_name() -> None:
    made = MembridgeSettings(port=9000, database_url="sqlite:///x.db")
    assert (made.port, made.database_url) == (9000, "sqlite:///x.db")
