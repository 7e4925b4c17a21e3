"""Rate limits on real servers: two processes sharing Redis, and X-Forwarded-For believed only from
trusted proxies."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.api import API
from tests.support.databases import fresh_postgres_url, fresh_sqlite_url
from tests.support.membridge import MembridgeProcess
from tests.support.postgres import PostgresCluster
from tests.support.rate_limits import REDIS, TOO_MANY
from tests.support.server import RuntimeProcess


@pytest.mark.process
def test_two_runtime_processes_sharing_redis_refuse_the_101st_request_between_them(
    postgres: PostgresCluster, tmp_path: Path, redis_prefix: str
) -> None:
    database_url = fresh_postgres_url(postgres)
    env = {
        "BLOOM_RATE_LIMIT_ENABLED": "true",
        "BLOOM_RATE_LIMIT_STORAGE": f"{REDIS}/0",
        "BLOOM_RATE_LIMIT_KEY_PREFIX": redis_prefix,
    }
    servers = [RuntimeProcess(database_url, tmp_path / name, **env) for name in ("a", "b")]
    try:
        with ThreadPoolExecutor() as starting:  # side by side: half the wait
            list(starting.map(lambda server: server.start(), servers))
        got: list[int] = []
        with httpx.Client(timeout=10) as http:
            for server in servers:
                got += [http.get(f"{server.url}{API}/stats").status_code for _ in range(60)]
            refused = http.get(f"{servers[0].url}{API}/stats")
        assert got == [200] * 100 + [429] * 20
        assert refused.status_code == 429
        assert refused.json() == TOO_MANY
        assert refused.headers["ratelimit-policy"] == "100;w=60"
    finally:
        for server in servers:
            server.stop()


@pytest.mark.process
@pytest.mark.parametrize("trusted", [False, True])
def test_real_servers_believe_x_forwarded_for_only_from_trusted_proxies(
    sqlite_template: Path, tmp_path: Path, trusted: bool
) -> None:
    """uvicorn, left to itself, takes X-Forwarded-For from 127.0.0.1 whatever the settings say:
    a caller on this machine could then be a new client at every request."""
    proxies = {"BLOOM_TRUSTED_PROXIES": "127.0.0.1"} if trusted else {}
    runtime = RuntimeProcess(
        fresh_sqlite_url(sqlite_template, tmp_path),
        tmp_path,
        BLOOM_RATE_LIMIT_ENABLED="true",
        BLOOM_RATE_LIMIT_API="3",
        # behind a proxy without a key the runtime serves only when told --insecure
        **({"BLOOM_INSECURE": "true"} if trusted else {}),
        **proxies,
    )
    membridge = MembridgeProcess(
        tmp_path / "membridge",
        BLOOM_MEMBRIDGE_RATE_LIMIT_ENABLED="true",
        BLOOM_MEMBRIDGE_RATE_LIMIT_API="3",
        **proxies,
    )
    try:
        with ThreadPoolExecutor() as starting:
            list(starting.map(lambda server: server.start(), (runtime, membridge)))
        with httpx.Client(timeout=10) as http:
            for url in (f"{runtime.url}{API}/stats", f"{membridge.url}/agents"):
                got = [
                    http.get(url, headers={"X-Forwarded-For": f"198.51.100.{n}"}).status_code
                    for n in range(1, 6)
                ]
                expected = 401 if url.endswith("/agents") else 200
                assert got == ([expected] * 5 if trusted else [expected] * 3 + [429] * 2), url
    finally:
        runtime.stop()
        membridge.stop()
