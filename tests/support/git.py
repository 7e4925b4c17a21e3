"""Git repositories served over real HTTP without a network: bare repositories kept ready with
`git update-server-info`, their directory served by a static HTTP server from a thread (git's
"dumb HTTP" protocol clones and pulls over that)."""

import functools
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.invalid"]


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class GitServer:
    """Bare repositories under `root/served`, each with a work tree under `root/work` that
    commits are made in and pushed from."""

    def __init__(self, root: Path):
        self.served, self.work = root / "served", root / "work"
        self.served.mkdir(parents=True)
        handler = functools.partial(_Quiet, directory=str(self.served))
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/{name}.git"

    def repository(self, name: str, files: dict[str, str], branch: str = "main") -> str:
        """A new repository with one commit of `files` on `branch`; its clone URL."""
        bare = self.served / f"{name}.git"
        git("init", "--bare", "--initial-branch", branch, str(bare))
        git("clone", str(bare), str(self.work / name))
        git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=self.work / name)
        self.commit(name, files)
        return self.url(name)

    def commit(self, name: str, files: dict[str, str], branch: str = "main") -> None:
        """Commit `files` in the repository's work tree and push them (served at once)."""
        tree = self.work / name
        for path, text in files.items():
            (tree / path).write_text(text)
        git("add", "--all", cwd=tree)
        git("commit", "--quiet", "-m", f"change {sorted(files)}", cwd=tree)
        git("push", "--quiet", "origin", f"HEAD:{branch}", cwd=tree)
        git("update-server-info", cwd=self.served / f"{name}.git")
