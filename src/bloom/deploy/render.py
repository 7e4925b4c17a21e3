"""The deployment files for one host: `Host` says what differs between hosts (a domain, the
services' users, the init system, paths and ports), `render` fills the templates of `files/` in
with it, `write_tree` writes them under a root (`/` installs them).

What the files must agree with is read from the code, not repeated: the body limit is the
servers' `BLOOM_MAX_BODY_BYTES` default, the proxy's read timeout outlasts the longest claim a
worker may ask for, the worker's stop timeout outlasts its drain, the ports are the servers'.
"""

import functools
import os
import pwd
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import jinja2

from bloom.domain.models import MAX_CLAIM_WAIT_SEC
from bloom.membridge.settings import MembridgeSettings
from bloom.runtime.settings import RuntimeSettings
from bloom.web.settings import ServerSettings
from bloom.worker.settings import WorkerSettings

Init = Literal["systemd", "openrc"]
P = PurePosixPath

RUNTIME_PORT: int = RuntimeSettings.model_fields["port"].default
MEMBRIDGE_PORT: int = MembridgeSettings.model_fields["port"].default
MAX_BODY_BYTES: int = ServerSettings.model_fields["max_body_bytes"].default
WORKER_DRAIN_SEC = int(WorkerSettings.model_fields["drain_timeout_sec"].default)
PROXY_READ_TIMEOUT_SEC = MAX_CLAIM_WAIT_SEC + 30
"""nginx waits this long for an answer: longer than any claim's long-poll."""
WORKER_STOP_MARGIN_SEC = 60
"""How much longer than the worker's drain a service manager waits before it kills."""
RUNTIME_ENV_EXAMPLE = "bloom-runtime.env.example"
WORKER_ENV_EXAMPLE = "bloom-worker.env.example"
SERVICES = ("runtime", "membridge", "worker")

DATA_DIR = P("/var/lib/bloom")
WORKER_DATA_DIR = P("/var/lib/bloom-worker")
LOG_DIR = P("/var/log")
CERT_DIR = P("/etc/ssl/bloom")
ACME_ROOT = P("/var/www/acme")
ENV_FILE = P("/etc/bloom-runtime.env")
WORKER_ENV_FILE = P("/etc/bloom-worker.env")
SANDBOX_HIDDEN = {
    P("/home"): "ProtectHome",
    P("/root"): "ProtectHome",
    P("/run/user"): "ProtectHome",
    P("/tmp"): "PrivateTmp",  # noqa: S108 (names the directory, makes no file)
    P("/var/tmp"): "PrivateTmp",  # noqa: S108
}
"""What the systemd units' sandbox hides from the services, and the setting that hides it."""


@dataclass(frozen=True)
class Host:
    """What differs from one host to the next. The defaults are the seeds' box, with TLS."""

    domain: str
    user: str
    init: Init
    bloom_bin: P
    worker_user: str = ""
    """The worker's own user (default: `<user>-worker`): what the Claude CLI runs cannot read
    the servers' secrets."""
    data_dir: P = DATA_DIR
    worker_data_dir: P = WORKER_DATA_DIR
    log_dir: P = LOG_DIR
    cert_dir: P = CERT_DIR
    acme_root: P = ACME_ROOT
    env_file: P = ENV_FILE
    worker_env_file: P = WORKER_ENV_FILE
    runtime_port: int = RUNTIME_PORT
    membridge_port: int = MEMBRIDGE_PORT
    http_port: int = 80
    https_port: int = 443
    listen: tuple[str, ...] = ("", "[::]:")
    """nginx's listen address prefixes: all IPv4 addresses, all IPv6 ones."""
    http2_directive: bool = False
    """nginx ≥ 1.25.1 turns HTTP/2 on with `http2 on;`; older ones with `listen … http2`."""

    @property
    def worker_account(self) -> str:
        return self.worker_user or f"{self.user}-worker"


@dataclass(frozen=True)
class Output:
    """One file for the host: where it goes, what it holds, its mode."""

    path: P
    text: str
    mode: int
    owner: str | None = None
    """Who must own it (the runtime's env file: its service's user; the worker's: root, whose
    service manager hands the worker its settings: the worker's user, and Claude, cannot read
    it)."""
    keep: bool = False
    """Never overwritten once present (the env files: they hold the host's secrets)."""


@dataclass
class Written:
    output: Output
    target: Path
    status: Literal["written", "kept", "same"]
    owner_set: bool = False


def hidden_from_services(path: P) -> tuple[P, str] | None:
    """The directory holding `path` that the systemd units hide from the services, with the
    setting that hides it; None when the services see `path`."""
    return next(((d, s) for d, s in SANDBOX_HIDDEN.items() if path.is_relative_to(d)), None)


def template_values(host: Host) -> dict[str, Any]:
    """What the templates may name."""
    values = asdict(host)
    values.update(
        worker_user=host.worker_account,
        group=host.user,
        worker_group=host.worker_account,
        https_port_suffix="" if host.https_port == 443 else f":{host.https_port}",
        max_body_bytes=MAX_BODY_BYTES,
        max_claim_wait=MAX_CLAIM_WAIT_SEC,
        read_timeout=PROXY_READ_TIMEOUT_SEC,
        worker_drain_timeout=WORKER_DRAIN_SEC,
        worker_stop_timeout=WORKER_DRAIN_SEC + WORKER_STOP_MARGIN_SEC,
        bloom_python=host.bloom_bin.parent / "python",
    )
    return values


def render_file(name: str, host: Host) -> str:
    """One template of `files/` filled in for `host`."""
    return _templates().get_template(name).render(template_values(host))


def nginx_site(host: Host) -> str:
    return render_file("nginx/bloom-runtime.conf", host)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def render(host: Host, make_secret: Callable[[], str] = new_secret) -> list[Output]:
    """Every file the host needs, filled in; the env files with fresh secrets (the runtime's
    API key, Membridge's admin key, shared with the worker)."""
    admin_key = make_secret()
    outputs = [
        Output(_nginx_path(host), nginx_site(host), 0o644),
        *_service_files(host),
        Output(P("/etc/logrotate.d/bloom"), render_file("logrotate/bloom", host), 0o644),
        Output(host.env_file, runtime_env(host, admin_key, make_secret()), 0o600, host.user, True),
        Output(host.worker_env_file, worker_env(host, admin_key), 0o600, "root", True),
    ]
    scripts = {
        "bloom-self-signed-cert": "tls/self-signed.sh",
        "bloom-certbot-hook": "tls/certbot-deploy-hook.sh",
        "bloom-backup": "backup/bloom-backup.sh",
        "bloom-restore": "backup/bloom-restore.sh",
    }
    for command, template in scripts.items():
        outputs.append(Output(P("/usr/local/sbin") / command, render_file(template, host), 0o755))
    return outputs


def runtime_env(host: Host, membridge_admin_key: str, api_key: str) -> str:
    """/etc/bloom-runtime.env: the example, with this host's values and secrets."""
    return fill_env(
        example_text(RUNTIME_ENV_EXAMPLE),
        {
            "PORT": str(host.runtime_port),
            "MEMBRIDGE_SERVER_URL": f"http://127.0.0.1:{host.membridge_port}",
            "MEMBRIDGE_ADMIN_KEY": membridge_admin_key,
            "RUNTIME_API_KEY": api_key,
            "BLOOM_DATA_DIR": str(host.data_dir),
            "BLOOM_MEMBRIDGE_PORT": str(host.membridge_port),
        },
    )


def worker_env(host: Host, membridge_admin_key: str) -> str:
    """/etc/bloom-worker.env: the example, with this host's values (its worker key is made once
    the runtime runs: `bloom key create --role worker`)."""
    return fill_env(
        example_text(WORKER_ENV_EXAMPLE),
        {
            "BLOOM_RUNTIME_URL": f"http://127.0.0.1:{host.runtime_port}",
            "BLOOM_MEMBRIDGE_URL": f"http://127.0.0.1:{host.membridge_port}",
            "MEMBRIDGE_ADMIN_KEY": membridge_admin_key,
            "BLOOM_DATA_DIR": str(host.worker_data_dir),
        },
    )


def example_text(name: str) -> str:
    return _templates().get_template(name).render()


def fill_env(text: str, values: dict[str, str]) -> str:
    """`text` (an env file) with each NAME's line, set or commented out, made `NAME=value`."""
    for name, value in values.items():
        line = re.compile(rf"^(?:#\s*)?{re.escape(name)}=.*$", re.MULTILINE)
        replacement = f"{name}={value}"
        text, found = line.subn(lambda _: replacement, text, count=1)  # noqa: B023  (used at once)
        if not found:
            raise ValueError(f"{name} is not in the env file")
    return text


def env_names(text: str) -> list[str]:
    """The NAMEs an env file lists, set (`NAME=…`) or shown (`# NAME=…`), in order."""
    return re.findall(r"^(?:#\s*)?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE)


def write_tree(outputs: Iterable[Output], root: Path, *, force: bool = False) -> list[Written]:
    """Write `outputs` under `root` (`/` installs them). Existing files are refused unless
    `force`; the env files are never overwritten (they hold the host's secrets): kept."""
    plan = [(output, root / output.path.relative_to("/")) for output in outputs]
    clashes = [
        target
        for output, target in plan
        if target.exists() and not output.keep and target.read_text() != output.text
    ]
    if clashes and not force:
        raise FileExistsError(
            "would overwrite "
            + ", ".join(str(target) for target in clashes)
            + " (--force overwrites them; env files are never overwritten)"
        )
    done: list[Written] = []
    for output, target in plan:
        if target.exists() and (output.keep or target.read_text() == output.text):
            done.append(Written(output, target, "kept" if output.keep else "same"))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.new")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, output.mode)
        with os.fdopen(fd, "w") as file:
            file.write(output.text)
        os.chmod(temporary, output.mode)
        owner_set = _chown(temporary, output.owner)
        temporary.replace(target)
        done.append(Written(output, target, "written", owner_set))
    return done


def _chown(path: Path, user: str | None) -> bool:
    """Give `path` to `user` when we may (root) and the user exists."""
    if user is None or os.geteuid() != 0:
        return False
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        return False
    os.chown(path, account.pw_uid, account.pw_gid)
    return True


def _nginx_path(host: Host) -> P:
    # Alpine's nginx includes http.d/*.conf; Debian's conf.d/*.conf (and sites-enabled/*).
    folder = "http.d" if host.init == "openrc" else "conf.d"
    return P("/etc/nginx") / folder / "bloom-runtime.conf"


def _service_files(host: Host) -> list[Output]:
    if host.init == "openrc":
        return [
            Output(P(f"/etc/init.d/bloom-{s}"), render_file(f"openrc/bloom-{s}", host), 0o755)
            for s in SERVICES
        ]
    return [
        Output(
            P(f"/etc/systemd/system/bloom-{s}.service"),
            render_file(f"systemd/bloom-{s}.service", host),
            0o644,
        )
        for s in SERVICES
    ]


def http2_directive(nginx_version: tuple[int, ...] | None) -> bool:
    """Whether this nginx wants `http2 on;` (1.25.1 and later) rather than `listen … http2`
    (deprecated there, the only way before). Unknown: the older way, which every version reads."""
    return nginx_version is not None and nginx_version >= (1, 25, 1)


def parse_nginx_version(text: str) -> tuple[int, ...] | None:
    """`nginx -v`'s answer (`nginx version: nginx/1.22.1`) as numbers."""
    found = re.search(r"nginx/(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


@functools.cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("bloom.deploy", "files"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701  (config files and shell scripts, not HTML)
    )
