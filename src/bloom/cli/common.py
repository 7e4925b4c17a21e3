"""What several commands share: settings and the database target, with clean errors."""

from typing import TYPE_CHECKING, Any

from bloom.cli.output import fail

if TYPE_CHECKING:  # imported by the commands that read them: not by `--help`
    from bloom.db.database import DatabaseTarget
    from bloom.runtime.settings import RuntimeSettings


def runtime_settings(**overrides: object) -> "tuple[RuntimeSettings, DatabaseTarget]":
    """The runtime's settings and database, or a one-line error and exit status 2."""
    from bloom.db.database import DatabaseUrlError, resolve_database
    from bloom.runtime.settings import load_runtime_settings
    from bloom.web.settings import SettingsError

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = load_runtime_settings(**given)
        return settings, resolve_database(settings.database_url, settings.data_dir)
    except SettingsError as exc:
        fail(str(exc), 2)
    except DatabaseUrlError as exc:
        fail(f"BLOOM_DATABASE_URL or DATABASE_URL: {exc}", 2)


KEEP_ALIVE_SEC = 75
"""How long the servers keep an idle connection open: well beyond the 5 s after which clients
(httpx, browsers) stop reusing one. With uvicorn's own default, also 5 s, a client could send
its next request on a connection the server was closing that instant (a ReadError, seen in a
2,000-task drain); nginx's upstream default is 60 s."""


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    """What `bloom runtime serve` and `bloom membridge serve` run uvicorn with."""
    return {
        "host": host,
        "port": port,
        "loop": "uvloop",
        "http": "httptools",
        "log_config": None,
        "access_log": False,  # our middleware logs requests
        "proxy_headers": False,  # X-Forwarded-* count from trusted proxies only (client_address)
        "timeout_keep_alive": KEEP_ALIVE_SEC,
        "timeout_graceful_shutdown": 5,
    }
