"""The deployment files, checked by the tools that run them: `bloom deploy render` for real,
shellcheck, the OpenRC scripts' functions under `sh` with OpenRC stubbed, `systemd-analyze
verify` and `security`, `nginx -t` (alone and inside this distribution's nginx.conf),
logrotate (a dry run, then a rotation under a live writer), the TLS scripts, and the services
refusing an env file that others may read."""

import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath
from subprocess import PIPE

import pytest
from typer.testing import CliRunner, Result

from bloom.cli.main import app
from bloom.deploy.render import Host, render_file
from tests.process.deploy.conftest import (
    BLOOM,
    DOMAIN,
    host_for,
    private_file,
    self_signed,
    write_script,
)
from tests.support.nginx import Nginx, distro_conf, tool
from tests.support.required import unavailable

SERVICES = ("runtime", "membridge", "worker")
NOBODY = 65534


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`bloom deploy render` for both init systems, as an operator runs it (side by side)."""
    trees = {init: tmp_path_factory.mktemp(init) for init in ("openrc", "systemd")}
    runs = [
        bloom_args(
            "deploy",
            "render",
            "--domain",
            DOMAIN,
            "--user",
            "bloom",
            f"--{init}",
            "--out",
            str(out),
        )
        for init, out in trees.items()
    ]
    for done in run_all(runs):
        assert done.returncode == 0, done.stderr
    return trees


def bloom_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "bloom.cli.main", *args]


def run_all(
    argvs: list[list[str]], env: dict[str, str] | None = None, cwd: Path | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Commands run side by side (each `bloom` spends seconds importing)."""
    started = [
        (argv, subprocess.Popen(argv, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE, text=True))
        for argv in argvs
    ]
    done = []
    for argv, process in started:
        out, err = process.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(argv, process.returncode, out, err))
    return done


def test_render_writes_every_file_for_the_host(rendered: dict[str, Path]) -> None:
    openrc, systemd = rendered["openrc"], rendered["systemd"]
    expected = {
        "etc/logrotate.d/bloom": 0o644,
        "etc/bloom-runtime.env": 0o600,
        "etc/bloom-worker.env": 0o600,
        "usr/local/sbin/bloom-self-signed-cert": 0o755,
        "usr/local/sbin/bloom-certbot-hook": 0o755,
        "usr/local/sbin/bloom-backup": 0o755,
        "usr/local/sbin/bloom-restore": 0o755,
    }
    openrc_files = (
        expected
        | {"etc/nginx/http.d/bloom-runtime.conf": 0o644}
        | {f"etc/init.d/bloom-{s}": 0o755 for s in SERVICES}
    )
    systemd_files = (
        expected
        | {"etc/nginx/conf.d/bloom-runtime.conf": 0o644}
        | {f"etc/systemd/system/bloom-{s}.service": 0o644 for s in SERVICES}
    )
    for root, files in ((openrc, openrc_files), (systemd, systemd_files)):
        found = {
            str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode)
            for p in root.rglob("*")
            if p.is_file()
        }
        assert found == files
    unit = (systemd / "etc/systemd/system/bloom-runtime.service").read_text()
    assert f"ExecStart={BLOOM} runtime serve" in unit
    assert "User=bloom" in unit
    worker = (systemd / "etc/systemd/system/bloom-worker.service").read_text()
    assert "User=bloom-worker" in worker


def render_in_process(*args: str) -> Result:
    """`bloom deploy render` in this process (the refusals need no fresh interpreter)."""
    return CliRunner().invoke(app, ["deploy", "render", *args])


def test_render_again_keeps_the_env_files_and_refuses_to_overwrite(
    rendered: dict[str, Path],
) -> None:
    out = rendered["openrc"]
    env = out / "etc/bloom-runtime.env"
    before = env.read_text()
    again = render_in_process("--domain", DOMAIN, "--user", "bloom", "--openrc", "--out", str(out))
    assert again.exit_code == 0, again.output
    assert "kept     /etc/bloom-runtime.env" in again.output
    assert env.read_text() == before  # its secrets stay
    other = render_in_process(
        "--domain", "other.test", "--user", "bloom", "--openrc", "--out", str(out)
    )
    assert other.exit_code == 1
    assert "bloom: would overwrite " in other.output
    assert "--force" in other.output
    assert env.read_text() == before


def test_render_refuses_what_it_cannot_write_safely(tmp_path: Path) -> None:
    out = ["--openrc", "--out", str(tmp_path)]
    bad_domain = render_in_process("--domain", "x; evil", "--user", "bloom", *out)
    assert bad_domain.exit_code == 2
    assert "host name" in bad_domain.output
    bad_user = render_in_process("--domain", DOMAIN, "--user", "Root Me", *out)
    assert bad_user.exit_code == 2
    assert not any(tmp_path.iterdir())


def test_render_warns_when_the_units_sandbox_hides_the_checkout(tmp_path: Path) -> None:
    """ProtectHome and PrivateTmp hide a checkout under /home or /tmp from the services: one
    line says so and where to install; the files are written all the same."""
    checkouts = {
        "tmp": Path(tempfile.mkdtemp(dir="/tmp")) / "bloom",
        "home": Path("/home/alice/bloom"),
        "opt": Path("/opt/bloom"),
    }
    runs = [
        bloom_args(
            "deploy", "render", "--domain", DOMAIN, "--user", "bloom", "--systemd",
            "--out", str(tmp_path / name), "--bloom", str(checkout / ".venv/bin/bloom"),
        )
        for name, checkout in checkouts.items()
    ]  # fmt: skip
    done = dict(zip(checkouts, run_all(runs), strict=True))
    for name, hidden, setting in (("tmp", "/tmp", "PrivateTmp"), ("home", "/home", "ProtectHome")):
        assert done[name].returncode == 0, done[name].stderr
        warnings = [line for line in done[name].stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1, done[name].stderr
        assert str(checkouts[name] / ".venv/bin/bloom") in warnings[0]
        assert f"{setting}=yes hides {hidden}" in warnings[0]
        assert "under /opt/bloom as docs/deployment.md does" in warnings[0]
        assert (tmp_path / name / "etc/systemd/system/bloom-runtime.service").exists()
    assert done["opt"].returncode == 0, done["opt"].stderr
    assert "warning" not in done["opt"].stderr
    checkouts["tmp"].parent.rmdir()


def test_shellcheck_finds_nothing_in_the_scripts(rendered: dict[str, Path]) -> None:
    shellcheck = tool("shellcheck")
    scripts = [
        *rendered["openrc"].glob("etc/init.d/*"),
        *rendered["openrc"].glob("usr/local/sbin/*"),
    ]
    assert len(scripts) == 7
    done = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


STUBS = """
RC_SVCNAME=$1
need() { echo "need $*"; }
after() { echo "after $*"; }
use() { echo "use $*"; }
before() { echo "before $*"; }
eerror() { echo "eerror $*"; }
checkpath() { echo "checkpath $*"; }
. "$2"
depend
echo "run $command $command_args | $command_user | $supervisor $supervise_daemon_args"
echo "files $pidfile $output_log $error_log | $retry | $respawn_max"
start_pre
echo "start_pre $?"
"""


def openrc(script: Path, env_file: Path) -> list[str]:
    """`depend` and `start_pre` of an OpenRC script, run by sh with OpenRC's functions stubbed."""
    shell = tool("dash") if os.path.exists("/usr/bin/dash") else "sh"
    done = subprocess.run(
        [shell, "-c", STUBS, "openrc-stub", script.stem, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": os.environ["PATH"], "BLOOM_ENV_FILE": str(env_file)},
    )
    assert done.stderr == "", done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("service", SERVICES)
def test_openrc_scripts_parse_and_check_before_starting(
    rendered: dict[str, Path], tmp_path: Path, service: str
) -> None:
    script = rendered["openrc"] / "etc/init.d" / f"bloom-{service}"
    assert script.read_text().startswith("#!/sbin/openrc-run\n")
    parsed = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
    assert parsed.returncode == 0, parsed.stderr
    env_file = private_file(tmp_path / "bloom.env", "PORT=5000\n")
    lines = openrc(script, env_file)
    user = "bloom-worker:bloom-worker" if service == "worker" else "bloom:bloom"
    command = {"runtime": "runtime serve", "membridge": "membridge serve", "worker": "worker run"}
    # The servers read their file themselves; the worker's settings come in its environment.
    reads = "" if service == "worker" else f"--env BLOOM_ENV_FILE={env_file}"
    assert lines[0] == "need net"
    assert lines[1].startswith("after firewall")
    assert lines[3] == f"run {BLOOM} {command[service]} | {user} | supervise-daemon {reads}"
    files, retry, respawn = lines[4].removeprefix("files ").split(" | ")
    assert files == (
        f"/run/bloom-{service}.pid /var/log/bloom-{service}.log /var/log/bloom-{service}-error.log"
    )
    assert retry == ("TERM/660/KILL/5" if service == "worker" else "TERM/30/KILL/5")
    assert respawn == "5"
    data_dir = "/var/lib/bloom-worker" if service == "worker" else "/var/lib/bloom"
    started = [
        f"checkpath --directory --owner {user} --mode 0700 {data_dir}",
        f"checkpath --file --owner {user} --mode 0640 /var/log/bloom-{service}.log "
        f"/var/log/bloom-{service}-error.log",
        "start_pre 0",
    ]
    if service == "worker":  # a file of root's only: the worker's user, and Claude, cannot read
        owner = NOBODY if os.geteuid() == 0 else os.geteuid()
        not_root = [
            f"eerror {env_file} holds the worker's keys, so only root may read it (owner uid "
            f"{owner}): chown root:root {env_file}",
            "start_pre 1",
        ]
        if os.geteuid() == 0:
            assert lines[5:] == started
            os.chown(env_file, owner, owner)
            lines = openrc(script, env_file)
        assert lines[5:] == not_root
    else:
        assert lines[5:] == started
    env_file.chmod(0o644)
    refused = openrc(script, env_file)
    assert refused[5:] == [
        f"eerror {env_file} holds secrets but group or others may read or change it "
        f"(mode 644): chmod 600 {env_file}",
        "start_pre 1",
    ]
    missing = openrc(script, tmp_path / "nope.env")
    assert missing[-1] == "start_pre 1"
    assert "does not exist" in missing[-2]


EXPORTS = """
eerror() { echo "eerror $*"; }
. "$1"
export_settings "$2" || exit 1
env
"""


def test_the_openrc_worker_gets_its_settings_in_its_environment(
    rendered: dict[str, Path], tmp_path: Path
) -> None:
    """The script reads the file as root and exports each setting, the value as written; a line
    of another shape stops the start, named by its number, its text (a secret?) not shown."""
    script = rendered["openrc"] / "etc/init.d/bloom-worker"
    settings = {
        "BLOOM_WORKER_API_KEY": "bloom_worker_k1",
        "QUOTED": "two  words",
        "SINGLE": "it's",
        "JSON": '["--bare"]',
        "EQUALS": "a=b",
        "BACKSLASH": "a\\b",
        "EMPTY": "",
        "LAST": "no newline",
    }
    text = (
        '# a comment\n\n  BLOOM_WORKER_API_KEY=bloom_worker_k1  \nQUOTED="two  words"\n'
        "SINGLE='it's'\nJSON=[\"--bare\"]\nEQUALS=a=b\nBACKSLASH=a\\b\nEMPTY=\nLAST=no newline"
    )
    env_file = private_file(tmp_path / "bloom-worker.env", text)
    exported = dict(line.split("=", 1) for line in exports(script, env_file).splitlines())
    assert {name: exported.get(name) for name in settings} == settings
    private_file(env_file, "GOOD=1\nsk-ant-pasted-alone\n")
    assert exports(script, env_file) == f"eerror {env_file}:2: expected NAME=value\n"


def exports(script: Path, env_file: Path) -> str:
    shell = tool("dash") if os.path.exists("/usr/bin/dash") else "sh"
    done = subprocess.run(
        [shell, "-c", EXPORTS, "openrc-stub", str(script), str(env_file)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.stderr == "", done.stderr
    return done.stdout


def test_systemd_units_verify_and_are_hardened(rendered: dict[str, Path]) -> None:
    analyze = tool("systemd-analyze", "systemd")
    units = sorted(str(p) for p in rendered["systemd"].glob("etc/systemd/system/*.service"))
    verified = subprocess.run(
        [analyze, "verify", *units], capture_output=True, text=True, timeout=120, check=False
    )
    if "Failed to initialize" in verified.stderr or "not been booted" in verified.stderr:
        unavailable(f"systemd-analyze verify cannot run here: {verified.stderr.strip()}")
    # It warns of unknown keys and bad values without failing: nothing may be said at all.
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")
    for unit in units:
        # "OK" or better on systemd's exposure scale (0 safe … 10 unsafe), not "MEDIUM".
        security = subprocess.run(
            [analyze, "security", "--offline=yes", "--threshold=49", unit],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert security.returncode == 0, security.stdout[-2000:] + security.stderr
    text = Path(units[2]).read_text()  # bloom-worker.service
    assert "KillMode=mixed" in text  # SIGTERM to the worker only: Claude's runs finish
    assert "TimeoutStopSec=660" in text
    # systemd reads the worker's settings as root; the worker reads no file itself
    assert "\nEnvironmentFile=/etc/bloom-worker.env\n" in text
    assert "BLOOM_ENV_FILE" not in text


def test_the_systemd_worker_does_not_start_when_its_user_can_read_its_settings() -> None:
    """The unit's start, run as a user that is not root (the worker's, here nobody): a settings
    file it can read (others may, or it is the user's own) is refused, exit status 2 (no
    restart); one only root can read lets the worker start."""
    with tempfile.TemporaryDirectory() as where:
        os.chmod(where, 0o755)  # (the user reaches the file: its own mode decides)
        check_the_workers_start(host_for(Path(where), bloom_bin=PurePosixPath("/bin/echo")))


def check_the_workers_start(host: Host) -> None:
    unit = render_file("systemd/bloom-worker.service", host)
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    shell = "ExecStart=/bin/sh -c '"
    assert start.startswith(shell)
    assert start.endswith("'")
    command = start[len(shell) : -1]
    as_user = (
        [tool("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        if os.geteuid() == 0
        else []
    )
    env_file = Path(host.worker_env_file)
    env_file.write_text("BLOOM_WORKER_API_KEY=k\n")

    def start_worker() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*as_user, "sh", "-c", command], capture_output=True, text=True, check=False
        )

    env_file.chmod(0o644)
    refused = start_worker()
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"bloom: {env_file} holds the worker keys, but its user (and so Claude) can read it: "
        f"chown root:root {env_file} && chmod 600 {env_file}\n"
    )
    if os.geteuid() == 0:
        os.chown(env_file, NOBODY, NOBODY)
        env_file.chmod(0o600)
        assert start_worker().returncode == 2  # the user's own file
        os.chown(env_file, 0, 0)
    else:
        env_file.chmod(0o000)  # as if root's: this user cannot read it
    started = start_worker()
    assert (started.returncode, started.stdout, started.stderr) == (0, "worker run\n", "")


def test_nginx_accepts_the_site_alone_and_in_this_distributions_nginx_conf(
    tmp_path: Path,
) -> None:
    host = host_for(tmp_path, http_port=18080, https_port=18443)
    self_signed(host)
    nginx = Nginx(tmp_path / "nginx", render_file("nginx/bloom-runtime.conf", host))
    alone = nginx.check()
    assert alone.returncode == 0, alone.stderr
    assert "syntax is ok" in alone.stderr
    assert "[warn]" not in alone.stderr, alone.stderr
    distro = distro_conf(nginx.prefix, nginx.site)
    if distro is None:
        pytest.skip("this machine has no /etc/nginx/nginx.conf")
    conf = nginx.prefix / "distro.conf"
    conf.write_text(distro)
    inside = nginx.check(conf)
    assert inside.returncode == 0, inside.stderr


def test_logrotate_dry_run_of_the_shipped_config(rendered: dict[str, Path], tmp_path: Path) -> None:
    logrotate = tool("logrotate")
    config = rendered["systemd"] / "etc/logrotate.d/bloom"
    assert "/var/log/bloom-*.log {" in config.read_text()
    done = subprocess.run(
        [logrotate, "-d", "-s", str(tmp_path / "state"), str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr


def test_logrotate_rotates_under_a_live_writer_without_a_restart(tmp_path: Path) -> None:
    """copytruncate: the service keeps its file open (appending, as supervise-daemon and systemd
    open it); after the rotation its next lines start the emptied file. The one loss copytruncate
    allows is the lines written between its copy and its truncation: a single gap at the rotation
    point (how long it is depends on the scheduler, so the test holds its shape, not its length)."""
    logrotate = tool("logrotate")
    host = host_for(tmp_path)
    logs = Path(host.log_dir)
    logs.mkdir(mode=0o755)
    config = tmp_path / "logrotate.conf"
    config.write_text(render_file("logrotate/bloom", host))
    config.chmod(0o644)
    log = logs / "bloom-runtime.log"
    writer = subprocess.Popen(
        [sys.executable, "-u", "-c", WRITER, str(log)], stdout=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lambda: log.exists() and log.stat().st_size > 1000)
        done = subprocess.run(
            [logrotate, "-f", "-s", str(tmp_path / "state"), str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        rotated = logs / "bloom-runtime.log.1"
        _wait_for(lambda: log.stat().st_size > 0)
        time.sleep(0.3)
    finally:
        writer.terminate()
        written = int(writer.communicate(timeout=10)[0].strip())
    old, new = rotated.read_bytes(), log.read_bytes()
    assert b"\0" not in new  # not a sparse file: the writer appends at the new end
    before, after = [int(n) for n in old.split()], [int(n) for n in new.split()]
    assert before[0] == 0
    assert after[-1] == written - 1  # the same writer, never restarted, still writing here
    assert len(after) > 10
    # In order, nothing doubled or torn, and each file whole: the copy holds every line up to the
    # rotation, the emptied file every line after the gap.
    assert before == list(range(len(before)))
    assert after == list(range(after[0], written))
    assert after[0] >= len(before)


WRITER = """
import os, signal, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
count = 0
def stop(*_):
    print(count)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    os.write(fd, b"%d\\n" % count)
    count += 1
    if count % 10 == 0:
        import time; time.sleep(0.01)
"""


def _wait_for(check, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_self_signed_certificate_names_the_host(tmp_path: Path) -> None:
    openssl = tool("openssl")
    host = host_for(tmp_path)
    for name, san in ((DOMAIN, f"DNS:{DOMAIN}"), ("10.1.2.3", "IP Address:10.1.2.3")):
        cert = self_signed(host, name)
        key = Path(host.cert_dir) / "privkey.pem"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        shown = subprocess.run(
            [openssl, "x509", "-in", str(cert), "-noout", "-text"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert san in shown
        assert "prime256v1" in shown


def test_the_certbot_hook_links_the_certificate_and_reloads_nginx(tmp_path: Path) -> None:
    host = host_for(tmp_path)
    hook = write_script(host, "tls/certbot-deploy-hook.sh", tmp_path / "bloom-certbot-hook")
    lineage = tmp_path / "letsencrypt/live" / DOMAIN
    lineage.mkdir(parents=True)
    for name in ("fullchain.pem", "privkey.pem"):
        (lineage / name).write_text(name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "nginx-calls"
    write_stub(bin_dir / "nginx", f'echo "$*" >> {calls}\n')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RENEWED_LINEAGE": str(lineage)}
    done = subprocess.run(["sh", str(hook)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for name in ("fullchain.pem", "privkey.pem"):
        assert (Path(host.cert_dir) / name).resolve() == lineage / name
    assert calls.read_text().splitlines() == ["-t -q", "-s reload"]


def write_stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)


def test_the_services_refuse_an_env_file_others_may_read(tmp_path: Path) -> None:
    env_file = private_file(tmp_path / "bloom-runtime.env", "RUNTIME_API_KEY=secret\n")
    env_file.chmod(0o644)
    env = {**os.environ, "BLOOM_ENV_FILE": str(env_file), "BLOOM_DATA_DIR": str(tmp_path)}
    commands = [("runtime", "serve"), ("membridge", "serve"), ("worker", "run")]
    for done in run_all([bloom_args(*command) for command in commands], env, tmp_path):
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"bloom: {env_file} holds secrets but group or others may read or change it "
            f"(mode 0644): chmod 600 {env_file}"
        ]


def test_a_private_env_file_configures_every_command(tmp_path: Path) -> None:
    database = tmp_path / "from-the-file.db"
    env_file = private_file(tmp_path / "bloom-runtime.env", f"DATABASE_URL=sqlite:///{database}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BLOOM_DATABASE_URL")}
    (done,) = run_all([bloom_args("db", "upgrade")], {**env, "BLOOM_ENV_FILE": str(env_file)})
    assert done.returncode == 0, done.stderr
    assert database.exists()
