"""Fresh, migrated runtime databases for tests: copies of a template, so that no test pays for
migrations (the template is made once per session by the `postgres` and `sqlite_template`
fixtures), and the runtime settings tests run with."""

import shutil
import uuid
from pathlib import Path

import psycopg

from bloom.runtime.settings import RuntimeSettings
from tests.support.net import closed_port
from tests.support.postgres import PostgresCluster

TEMPLATE_DB = "bloom_template"
NO_MEMBRIDGE = f"http://127.0.0.1:{closed_port()}"
"""Nothing listens there: a test that wants Membridge starts one and says so."""
IN_PROCESS_HOSTS = ("runtime", "membridge", "bloom.test", "test", "testserver")
"""The Host names of the tests' in-process clients, served in open mode (which answers loopback
names only, and these: `BLOOM_ALLOWED_HOSTS`)."""


def fresh_postgres_url(cluster: PostgresCluster) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    return cluster.url(name)


def fresh_sqlite_url(template: Path, directory: Path) -> str:
    path = directory / "runtime.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


def make_settings(database_url: str, data_dir: Path, **overrides: object) -> RuntimeSettings:
    values: dict[str, object] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "api_key": None,
        "access_log": False,
        "reaper_interval_sec": 3600.0,  # tests reap explicitly, on the fake clock
        "claim_recheck_sec": 0.05,
        "membridge_server_url": NO_MEMBRIDGE,
        "membridge_retries": 0,
        "rate_limit_enabled": False,  # tests of the limits turn them on
        "allowed_hosts": IN_PROCESS_HOSTS,
    }
    return RuntimeSettings(**(values | overrides))  # type: ignore[arg-type]
