"""Git repositories served over smart HTTP by git's own `git http-backend` (CGI), as a forge
serves them: nodes clone, fetch and push with the transport they use in production."""

import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

AUTHOR = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **AUTHOR},
    )
    return done.stdout


class GitServer:
    """Bare repositories under `root`, each at `<url>/<name>.git`, pushes accepted."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        server_root = root

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._backend()

            def do_POST(self) -> None:
                self._backend()

            def _backend(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = {
                    "PATH": os.environ["PATH"],
                    "GIT_PROJECT_ROOT": str(server_root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": url.path,
                    "QUERY_STRING": url.query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(length),
                    "REMOTE_USER": "tester",
                    "REMOTE_ADDR": "127.0.0.1",
                    "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                }
                if self.headers.get("Content-Encoding"):
                    env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
                done = subprocess.run(
                    ["git", "http-backend"], input=body, capture_output=True, env=env, timeout=60
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.decode().split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "GitServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "GitServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create(self, name: str, files: dict[str, str], work: Path) -> str:
        """A repository `name` whose `main` holds `files` in one commit; its URL."""
        bare = self.root / f"{name}.git"
        git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
        git("config", "http.receivepack", "true", cwd=bare)
        checkout = work / name
        git("init", "--quiet", "--initial-branch=main", str(checkout))
        for path, text in files.items():
            (checkout / path).write_text(text)
        git("add", "--all", cwd=checkout)
        git("commit", "--quiet", "-m", "initial", cwd=checkout)
        git("push", "--quiet", str(bare), "main", cwd=checkout)
        return f"{self.url}/{name}.git"

    def head(self, name: str, branch: str) -> str | None:
        """The branch's commit in the served repository (None: not there)."""
        bare = self.root / f"{name}.git"
        found = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
            cwd=bare,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return found.stdout.strip() or None
