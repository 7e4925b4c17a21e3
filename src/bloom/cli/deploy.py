"""`bloom deploy render`: the deployment files filled in for this host (docs/deployment.md);
`bloom deploy settings`: where the settings put the state, for the backup scripts."""

import ipaddress
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer
from sqlalchemy import URL

from bloom.cli.common import runtime_settings
from bloom.cli.output import fail, say
from bloom.db.database import DatabaseTarget, DatabaseUrlError, StorageKind
from bloom.deploy.render import (
    CERT_DIR,
    DATA_DIR,
    MEMBRIDGE_PORT,
    RUNTIME_PORT,
    WORKER_DATA_DIR,
    Host,
    Init,
    Written,
    hidden_from_services,
    http2_directive,
    parse_nginx_version,
    render,
    write_tree,
)
from bloom.membridge.container import database_target
from bloom.membridge.settings import load_membridge_settings
from bloom.runtime.secret_key import FILE_NAME as SECRET_KEY_FILE
from bloom.web.settings import SettingsError

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's

LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}")


def _domain(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not HOST_NAME.fullmatch(value):
            raise typer.BadParameter("a host name (bloom.example.org) or an IP address") from None
    return value


def _user(value: str | None) -> str | None:
    if value is not None and not USER_NAME.fullmatch(value):
        raise typer.BadParameter("a user name: lower-case letters, digits, _ and -")
    return value


def _absolute(value: Path) -> Path:
    if not value.is_absolute():
        raise typer.BadParameter("an absolute path")
    return value


@app.command("render")
def render_files(
    domain: Annotated[
        str,
        typer.Option(callback=_domain, help="The host's name: nginx's and the certificate's"),
    ],
    user: Annotated[
        str,
        typer.Option(callback=_user, help="The servers' user (runtime, Membridge)"),
    ],
    systemd: Annotated[
        bool | None,
        typer.Option("--systemd/--openrc", help="The init system  [default: this host's]"),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Where to write, as under / (`--out /` installs, as root)")
    ] = Path("bloom-deploy"),
    worker_user: Annotated[
        str | None,
        typer.Option(callback=_user, help="The worker's own user  [default: <user>-worker]"),
    ] = None,
    bloom: Annotated[
        Path | None,
        typer.Option(help="The bloom command the services run  [default: this one]"),
    ] = None,
    data_dir: Annotated[
        Path, typer.Option(callback=_absolute, help="The servers' data dir")
    ] = Path(DATA_DIR),
    worker_data_dir: Annotated[
        Path, typer.Option(callback=_absolute, help="The worker's data dir (its HOME)")
    ] = Path(WORKER_DATA_DIR),
    cert_dir: Annotated[
        Path, typer.Option(callback=_absolute, help="Where nginx finds fullchain.pem, privkey.pem")
    ] = Path(CERT_DIR),
    runtime_port: Annotated[int, typer.Option(min=1, max=65535)] = RUNTIME_PORT,
    membridge_port: Annotated[int, typer.Option(min=1, max=65535)] = MEMBRIDGE_PORT,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files that differ (never the env files)")
    ] = False,
) -> None:
    """Write the deployment files filled in for this host: the nginx site (TLS), the services
    (systemd or OpenRC), the env files with fresh secrets, logrotate, TLS and backup scripts."""
    init: Init = "systemd" if systemd else "openrc"
    if systemd is None:
        init = detect_init() or fail(
            "cannot tell this host's init system: say --systemd or --openrc", 2
        )
    host = Host(
        domain=domain,
        user=user,
        init=init,
        bloom_bin=PurePosixPath(_bloom_command(bloom)),
        worker_user=worker_user or "",
        data_dir=PurePosixPath(data_dir),
        worker_data_dir=PurePosixPath(worker_data_dir),
        cert_dir=PurePosixPath(cert_dir),
        runtime_port=runtime_port,
        membridge_port=membridge_port,
        http2_directive=http2_directive(nginx_version()),
    )
    try:
        written = write_tree(render(host), out, force=force)
    except FileExistsError as exc:
        fail(str(exc), 1)
    except OSError as exc:
        fail(f"cannot write under {out}: {exc.strerror or exc}", 1)
    _report(host, out, written)
    if init == "systemd":
        _warn_if_hidden(Path(host.bloom_bin))


def _warn_if_hidden(command: Path) -> None:
    """One line when the systemd units' sandbox hides the bloom command, or the Python it runs
    on, from the services (a checkout under /home or /tmp, a Python under /root)."""
    for path in (command, command.resolve(), command.with_name("python").resolve()):
        hidden = hidden_from_services(PurePosixPath(path))
        if hidden is not None:
            where, setting = hidden
            typer.secho(
                f"bloom: warning: the services cannot run {path}: the units' {setting}=yes "
                f"hides {where} from them; install bloom and its Python outside it, under "
                "/opt/bloom as docs/deployment.md does, and render with that bloom",
                err=True,
                fg=typer.colors.YELLOW,
            )
            return


def _report(host: Host, out: Path, written: list[Written]) -> None:
    say(f"{host.init} files for {host.domain} under {out}:")
    for item in written:
        say(f"  {item.status:8} {item.output.path}")
    unowned = [w for w in written if w.output.owner and w.status == "written" and not w.owner_set]
    say("Next, as root (docs/deployment.md has every step):")
    if out.resolve() != Path("/"):
        say(f"  cp -an {shlex.quote(str(out))}/. /     # -n: an existing env file stays as it is")
    for item in unowned:
        say(f"  chown {item.output.owner} {item.output.path}")
    say("  bloom-self-signed-cert     # or Let's Encrypt: see bloom-certbot-hook's comment")


def detect_init() -> Init | None:
    """This host's init system, when it can be told."""
    if Path("/run/systemd/system").is_dir():
        return "systemd"
    if Path("/sbin/openrc-run").exists() or Path("/run/openrc").is_dir():
        return "openrc"
    return None


def nginx_version() -> tuple[int, ...] | None:
    """The installed nginx's version, or None without one."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if nginx is None:
        return None
    try:
        answer = subprocess.run(  # noqa: S603  (nginx -v, found on PATH)
            [nginx, "-v"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_nginx_version(answer.stderr + answer.stdout)


def _bloom_command(given: Path | None) -> Path:
    """The `bloom` the services run: the one given, else the one running now."""
    if given is not None:
        return _absolute(given)
    beside = Path(sys.executable).with_name("bloom")
    if beside.is_absolute() and beside.exists():
        return beside
    found = shutil.which("bloom")
    if found is None:
        fail("cannot find the bloom command: say --bloom /path/to/bloom", 2)
    return Path(found).absolute()


def without_password(target: DatabaseTarget) -> tuple[str, str]:
    """A database as the backup scripts name it, and its password apart (they hand PostgreSQL's
    to pg_dump and pg_restore in a password file, never on a command line): a PostgreSQL
    target's libpq URI without the password, or a SQLite file and ""."""
    if target.kind is not StorageKind.POSTGRESQL:
        return target.dsn, ""
    url = target.url.difference_update_query(["password"])
    bare = URL.create("postgresql", url.username, None, url.host, url.port, url.database, url.query)
    password = target.url.password or str(target.url.query.get("password") or "")
    return bare.render_as_string(hide_password=False), password


@app.command("settings", hidden=True)
def show_settings() -> None:
    """Where the runtime's and Membridge's settings put their state, as shell assignments
    (`eval "$(bloom deploy settings)"`): what bloom-backup and bloom-restore read."""
    runtime, target = runtime_settings()
    try:
        membridge = load_membridge_settings()
        membridge_target = database_target(membridge)
    except (SettingsError, DatabaseUrlError) as exc:
        fail(str(exc), 2)
    runtime_db, runtime_password = without_password(target)
    membridge_db, membridge_password = without_password(membridge_target)
    values = {
        "RUNTIME_DB_KIND": target.kind.value,
        "RUNTIME_DB": runtime_db,
        "RUNTIME_DB_PASSWORD": runtime_password,
        "MEMBRIDGE_DB_KIND": membridge_target.kind.value,
        "MEMBRIDGE_DB": membridge_db,
        "MEMBRIDGE_DB_PASSWORD": membridge_password,
        "DATA_DIR": str(runtime.data_dir.resolve()),
        "MEMBRIDGE_DATA_DIR": str(membridge.data_dir.resolve()),
        "SECRET_KEY_FILE": ""
        if runtime.secret_key
        else str((runtime.data_dir / SECRET_KEY_FILE).resolve()),
        "ARTIFACT_STORE": runtime.artifact_store,
        "ARTIFACT_DIR": str(runtime.resolved_artifact_dir.resolve()),
        "S3_ENDPOINT": runtime.s3_endpoint_url if runtime.s3_configured else "",
        "S3_BUCKET": runtime.s3_bucket,
        "S3_REGION": runtime.s3_region,
        "S3_ACCESS_KEY": runtime.s3_access_key.get_secret_value(),
        "S3_SECRET_KEY": runtime.s3_secret_key.get_secret_value(),
    }
    for name, value in values.items():
        typer.echo(f"{name}={shlex.quote(value)}")
