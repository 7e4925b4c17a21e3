"""A throwaway PostgreSQL cluster for the test session: initdb + pg_ctl on a free port.

Works as root (initdb refuses root, so the server runs as the `postgres` user) and as a normal
user. Durability is switched off, as this cluster only lives for one test session, unless the
test crashes it (`durable`: a commit it acknowledged must survive `crash`).
"""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.net import free_port


class PostgresUnavailable(RuntimeError):
    pass


def _bindir() -> Path:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(out.stdout.strip())
        if (candidate / "initdb").exists():
            return candidate
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(path, "initdb").exists():
            return Path(path)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found")


class PostgresCluster:
    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="bloom-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.port = free_port()
        self.run_as: str | None = "postgres" if os.geteuid() == 0 else None

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def start(self) -> None:
        self.socket_dir.mkdir()
        if self.run_as:
            user = pwd.getpwnam(self.run_as)
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        subprocess.run(
            self._cmd(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ),
            check=True,
            capture_output=True,
        )
        self.resume()

    def resume(self) -> None:
        """Start the server on its existing data (after `crash`), on the same port."""
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.socket_dir}",
                "-c listen_addresses=127.0.0.1",
                *(
                    ()
                    if self.durable
                    else ("-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
                ),
                "-c max_connections=300",
                "-c shared_buffers=256MB",
            ]
        )
        subprocess.run(
            self._cmd(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.root / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def crash(self) -> None:
        """Stop the server hard (`pg_ctl -m immediate`: every connection cut, no checkpoint),
        keeping its data for `resume`."""
        subprocess.run(
            self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"),
            check=False,
            capture_output=True,
        )

    def stop(self) -> None:
        self.crash()
        shutil.rmtree(self.root, ignore_errors=True)
