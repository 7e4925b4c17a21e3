"""A real `bloom membridge serve` process for end-to-end tests: start, wait, kill -9, restart."""

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bloom.membridge.settings import MembridgeSettings
from tests.support.databases import IN_PROCESS_HOSTS
from tests.support.postgres import PostgresCluster
from tests.support.process import ServerProcess

ADMIN_KEY = "test-admin-key-123"
ADMIN_HEADER = "X-MEMBRIDGE-ADMIN"
MEMBRIDGE_TEMPLATE_DB = "membridge_template"
# Our names and the reference's: the child gets exactly what the test gives it, nothing inherited.
MEMBRIDGE_ENV_PREFIXES = ("BLOOM_MEMBRIDGE_", "MEMBRIDGE_")
INHERITED_BLOOM = ("BLOOM_DATA_DIR", "BLOOM_LOG_LEVEL", "BLOOM_LOG_FORMAT", "BLOOM_ACCESS_LOG")


def membridge_env(data_dir: Path, **env: str) -> dict[str, str]:
    """The environment of a `bloom membridge …` child: the test's settings only."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(MEMBRIDGE_ENV_PREFIXES) and key not in INHERITED_BLOOM
    }
    quiet = {"BLOOM_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    # Tests of the rate limits turn them on.
    return {**base, **quiet, "BLOOM_MEMBRIDGE_RATE_LIMIT_ENABLED": "false", **env}


class MembridgeProcess(ServerProcess):
    """The control plane as a child process on a free port, its output kept in a log file.

    `database_url` None means the default: SQLite `membridge.db` under `data_dir`. With
    `admin_key` None no key is configured (pass `MEMBRIDGE_DEV="1"` in `env` to serve anyway).
    """

    command = ("membridge", "serve")
    health_path = "/health"
    name = "membridge"

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None = None,
        *,
        admin_key: str | None = ADMIN_KEY,
        **env: str,
    ):
        super().__init__(data_dir)
        self.database_url = database_url
        self.admin_key = admin_key
        self.extra_env = env

    @property
    def sqlite_path(self) -> Path:
        return (self.data_dir / "membridge.db").resolve()

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.sqlite_path}"

    @property
    def headers(self) -> dict[str, str]:
        return {ADMIN_HEADER: self.admin_key} if self.admin_key else {}

    def environment(self) -> dict[str, str]:
        env = dict(self.extra_env)
        if self.database_url:
            env["BLOOM_MEMBRIDGE_DATABASE_URL"] = self.database_url
        if self.admin_key:
            env["MEMBRIDGE_ADMIN_KEY"] = self.admin_key
        return membridge_env(self.data_dir, **env)

    def client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client for this server that sends the admin key (if there is one)."""
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=10, **kwargs)


def run_membridge_cli(
    *args: str, data_dir: Path, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """`bloom membridge <args>` to completion, with only the given settings."""
    return subprocess.run(
        [sys.executable, "-m", "bloom.cli.main", "membridge", *args],
        env=membridge_env(data_dir, **env),
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def fresh_membridge_postgres_url(cluster: PostgresCluster) -> str:
    name = f"mb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {MEMBRIDGE_TEMPLATE_DB}")
    return cluster.url(name)


def empty_postgres_url(cluster: PostgresCluster) -> str:
    """A database with no tables at all."""
    name = f"mbe_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return cluster.url(name)


def membridge_settings(database_url: str, data_dir: Path, **overrides: object) -> MembridgeSettings:
    values: dict[str, object] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "admin_key": None,
        "dev": True,
        "access_log": False,
        "rate_limit_enabled": False,
        "allowed_hosts": IN_PROCESS_HOSTS,
    }
    return MembridgeSettings(**(values | overrides))  # type: ignore[arg-type]
