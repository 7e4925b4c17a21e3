"""nginx for the deployment tests: the repository's site, rendered for a test host, run as a child
process (not a daemon) with its prefix, pid, logs and temp files under a test directory."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.required import unavailable

DISTRO_CONF = Path("/etc/nginx/nginx.conf")


def tool(name: str, package: str | None = None) -> str:
    """A command the deployment tests run: its path, else skipped on a laptop (a CI failure)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        unavailable(f"{name} is not installed (apt-get install {package or name}; .ci/run does)")
    return found


def main_conf(prefix: Path, site: Path) -> str:
    """An nginx.conf that includes only `site`, with everything it writes under `prefix`. As
    root, the workers run as root too: the test's files are its own (nginx's default, nobody,
    could not read them)."""
    user = "user root root;\n" if os.geteuid() == 0 else ""
    return f"""daemon off;
{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {site};
}}
"""


def distro_conf(prefix: Path, site: Path) -> str | None:
    """This machine's own nginx.conf with `site` in place of the sites it includes (and its
    logs and pid under `prefix`): does the site live alongside the distribution's settings?"""
    if not DISTRO_CONF.exists():
        return None
    text = re.sub(r"#.*$", "", DISTRO_CONF.read_text(), flags=re.MULTILINE)  # comments
    text = re.sub(
        r"^\s*include\s+\S*/(sites-enabled|conf\.d|http\.d)/\S*;",
        "",
        text,
        flags=re.MULTILINE,
    )
    text = re.sub(r"^(\s*)pid\s+\S+;", rf"\1pid {prefix}/distro.pid;", text, flags=re.MULTILINE)
    text = re.sub(r"^(\s*error_log)\s+[^;]+;", rf"\1 {prefix}/distro-error.log;", text, flags=re.M)
    text = re.sub(
        r"^(\s*access_log)\s+[^;]+;", rf"\1 {prefix}/distro-access.log;", text, flags=re.M
    )
    if os.geteuid() != 0:
        text = re.sub(r"^\s*user\s+[^;]+;", "", text, flags=re.MULTILINE)
    closing = text.rindex("}")  # the http block's end: the site goes inside it
    return f"{text[:closing]}    include {site};\n{text[closing:]}"


class Nginx:
    """nginx with `site` (an http-level fragment, as the repository's), under `prefix`."""

    def __init__(self, prefix: Path, site_text: str):
        self.binary = tool("nginx")
        self.prefix = prefix
        prefix.mkdir(parents=True, exist_ok=True)
        self.site = prefix / "bloom-runtime.conf"
        self.site.write_text(site_text)
        self.conf = prefix / "nginx.conf"
        self.conf.write_text(main_conf(prefix, self.site))
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self, conf: Path, *args: str) -> list[str]:
        error_log = self.prefix / "startup-error.log"
        return [self.binary, "-p", f"{self.prefix}/", "-c", str(conf), "-e", str(error_log), *args]

    def check(self, conf: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`nginx -t` of the configuration."""
        return subprocess.run(
            self.argv(conf or self.conf, "-t"),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def start(self, ports: list[int], timeout: float = 15) -> None:
        out = (self.prefix / "stdout.log").open("ab")
        self.process = subprocess.Popen(self.argv(self.conf), stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited early:\n{self.log()}")
            if all(_accepts(port) for port in ports):
                return
            time.sleep(0.05)
        raise TimeoutError(f"nginx not listening on {ports} after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: let requests finish
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        parts = []
        for name in ("startup-error.log", "error.log", "stdout.log"):
            path = self.prefix / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class SniTransport(httpx.HTTPTransport):
    """Connects to 127.0.0.1 but speaks TLS (SNI, certificate check) and HTTP (Host) as
    `domain`, as curl's --resolve does: the certificate is the host's, not the address's."""

    def __init__(self, domain: str, **kwargs: object):
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.domain = domain

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.extensions = {**request.extensions, "sni_hostname": self.domain}
        request.headers["Host"] = request.headers["Host"].replace("127.0.0.1", self.domain)
        return super().handle_request(request)


class AsyncSniTransport(httpx.AsyncHTTPTransport):
    """`SniTransport` for asyncio."""

    def __init__(self, domain: str, **kwargs: object):
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.domain = domain

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.extensions = {**request.extensions, "sni_hostname": self.domain}
        request.headers["Host"] = request.headers["Host"].replace("127.0.0.1", self.domain)
        return await super().handle_async_request(request)
