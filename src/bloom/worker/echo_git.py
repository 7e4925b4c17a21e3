"""The demo's git server: `bloom up --demo-model` keeps a small repository, `demo.git`, under its
data dir and the echo model serves it over smart HTTP (git's own `git http-backend`), so that a
workspace task can be tried with nothing else (docs/workspaces.md). Pushes are accepted: it is
the demo's remote. Loopback only, as the echo model is."""

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from bloom.worker.demo import DEMO_REPO

README = """# demo

A small repository that `bloom up --demo-model` serves, for trying workspace tasks:

    bloom task submit --repo demo "add a hello.txt saying hi" --wait
"""
BACKEND_TIMEOUT_SEC = 60.0
AUTHOR = {
    "GIT_AUTHOR_NAME": "BLOOM demo",
    "GIT_AUTHOR_EMAIL": "demo@localhost",
    "GIT_COMMITTER_NAME": "BLOOM demo",
    "GIT_COMMITTER_EMAIL": "demo@localhost",
}


def seed(root: Path) -> Path:
    """`<root>/demo.git`, made once (a README on `main`), pushes allowed; its path."""
    bare = root / f"{DEMO_REPO}.git"
    if (bare / "HEAD").exists():
        return bare
    work = root / ".seed"
    env = {**os.environ, **AUTHOR, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str, cwd: Path | None = None) -> None:
        subprocess.run(  # noqa: S603
            ["git", "-c", "core.hooksPath=/dev/null", *args],  # noqa: S607
            cwd=cwd, env=env, capture_output=True, timeout=60, check=True,
        )  # fmt: skip

    root.mkdir(parents=True, exist_ok=True)
    git("init", "--quiet", "--initial-branch=main", str(work))
    (work / "README.md").write_text(README)
    git("add", "README.md", cwd=work)
    git("commit", "--quiet", "-m", "A repository to try workspace tasks on", cwd=work)
    git("clone", "--quiet", "--bare", str(work), str(bare))
    git("config", "http.receivepack", "true", cwd=bare)
    shutil.rmtree(work, ignore_errors=True)
    return bare


async def serve(request: Request, root: Path) -> Response:
    """One smart-HTTP request, answered by `git http-backend` (CGI) over `root`."""
    body = await request.body()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "REQUEST_METHOD": request.method,
        "PATH_INFO": "/" + request.path_params["path"],
        "QUERY_STRING": request.url.query,
        "CONTENT_TYPE": request.headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_USER": "demo",
        "REMOTE_ADDR": request.client.host if request.client else "127.0.0.1",
        "HTTP_GIT_PROTOCOL": request.headers.get("git-protocol", ""),
    }
    if encoding := request.headers.get("content-encoding"):
        env["HTTP_CONTENT_ENCODING"] = encoding
    process = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(body), BACKEND_TIMEOUT_SEC)
    except TimeoutError:
        process.kill()
        await process.wait()
        return Response("git http-backend timed out\n", status_code=504)
    head, _, payload = out.partition(b"\r\n\r\n")
    status, headers = 200, {}
    for line in head.decode(errors="replace").split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name:
            headers[name] = value.strip()
    return Response(payload, status_code=status, headers=headers)
