"""What the deployment tests share: the repository's files rendered for a test host."""

import os
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from bloom.cli.deploy import nginx_version
from bloom.deploy.render import Host, http2_directive, render_file
from tests.support.nginx import tool

DOMAIN = "bloom.test"
BLOOM = PurePosixPath(sys.executable).with_name("bloom")
"""The bloom command these tests run: the services' ExecStart must name one that exists."""


def host_for(tmp: Path, **overrides: object) -> Host:
    """The seeds' box, its paths under `tmp`: what `bloom deploy render` would fill in."""
    values: dict[str, object] = {
        "domain": DOMAIN,
        "user": "bloom",
        "init": "systemd",
        "bloom_bin": BLOOM,
        "data_dir": PurePosixPath(tmp / "data"),
        "worker_data_dir": PurePosixPath(tmp / "worker"),
        "log_dir": PurePosixPath(tmp / "log"),
        "cert_dir": PurePosixPath(tmp / "tls"),
        "acme_root": PurePosixPath(tmp / "acme"),
        "env_file": PurePosixPath(tmp / "bloom-runtime.env"),
        "worker_env_file": PurePosixPath(tmp / "bloom-worker.env"),
        "listen": ("127.0.0.1:",),
        "http2_directive": http2_directive(nginx_version()),
    }
    return Host(**(values | overrides))  # type: ignore[arg-type]


def write_script(host: Host, template: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_file(template, host))
    path.chmod(0o755)
    return path


def self_signed(host: Host, name: str = DOMAIN) -> Path:
    """A certificate for `name` in the host's cert dir, made by the repository's script."""
    tool("openssl")
    script = write_script(host, "tls/self-signed.sh", Path(host.cert_dir).parent / "self-signed")
    done = subprocess.run(
        ["sh", str(script), name, str(host.cert_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Path(host.cert_dir) / "fullchain.pem"


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture(autouse=True)
def _no_env_file_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLOOM_ENV_FILE", raising=False)
    assert "BLOOM_ENV_FILE" not in os.environ
