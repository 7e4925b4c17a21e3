"""A managed project's checkout on this node: the agent's `/clone` (REFERENCE_BEHAVIOUR.md §4.8),
served only by a worker started with `--allow-clone`.

As the reference: `git clone [--branch b] url target`, or `git pull` in a target that is a
checkout already, answered `{ok, action, path, project_name, stdout, stderr, detail}` (HTTP 200
with `ok: false` when git fails). Unlike it (§9.4): the branch must be a plain branch name
(`bloom.domain.branch`); the target, resolved through symlinks (a relative one under the
repositories' base), must be a directory directly in that base (by path components:
`~/projects-evil` is not in `~/projects`), its name not starting with `.`, with no checkout
above it, and still so once cloned (else what was cloned is removed); git runs without a shell,
without the worker's secrets in its environment, never asks for a password, speaks only
http(s) and ssh, and an existing checkout only fast-forwards.
"""

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloom.domain.branch import PLAIN_BRANCH, is_plain_branch
from bloom.worker.agents.environment import without_secrets

PROJECT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
REPO_URL = re.compile(r"(?:https?://|ssh://|git@)[^\s\x00-\x1f\x7f]{1,1024}")
FIELDS = frozenset({"repo_url", "project_name", "target_path", "branch"})
CLONE_TIMEOUT_SEC = 300.0
PULL_TIMEOUT_SEC = 120.0
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "http:https:ssh"}
STDOUT_LINES, STDERR_LINES = 30, 10


class GitRefused(Exception):
    """A clone or self-update request answered with an HTTP error `status` and `detail`."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Checkout:
    """A checked request: which repository, its project's name, where, which branch."""

    repo_url: str
    project_name: str
    path: Path
    branch: str | None = None

    @classmethod
    def from_json(cls, body: Any, base: Path) -> "Checkout":
        """The request `{repo_url, project_name, target_path?, branch?}`; GitRefused (400)."""
        if not isinstance(body, dict):
            raise GitRefused(400, "Expected a JSON object {repo_url, project_name, ...}")
        if unknown := sorted(set(body) - FIELDS):
            raise GitRefused(400, f"Unknown field: {unknown[0]}")
        name, url = body.get("project_name"), body.get("repo_url")
        target = body.get("target_path")
        if not isinstance(name, str) or not PROJECT_NAME.fullmatch(name):
            raise GitRefused(400, "project_name: 1..128 letters, digits, '.', '_' or '-'")
        if not isinstance(url, str) or not REPO_URL.fullmatch(url):
            raise GitRefused(400, "repo_url must start with http://, https://, ssh:// or git@")
        branch = requested_branch(body.get("branch"))
        if target is not None and (not isinstance(target, str) or not target or "\0" in target):
            raise GitRefused(400, "target_path: a non-empty path")
        return cls(url, name, target_in(base, target or name), branch)


def requested_branch(value: object) -> str | None:
    """A request's `branch`: none, or a plain branch name; GitRefused (400) otherwise."""
    if value is None or (isinstance(value, str) and is_plain_branch(value)):
        return value
    raise GitRefused(400, f"branch: not {PLAIN_BRANCH}")


def target_in(base: Path, target: str) -> Path:
    """`target` (`~` expanded; a relative one under `base`) with its symlinks resolved; refused
    (400) unless it is directly in `base` (resolved too, compared by path components), named
    without a leading `.`, and no directory above it holds a `.git` (a checkout's work tree)."""
    root = base.expanduser().resolve()
    path = (root / Path(target).expanduser()).resolve()
    if root not in path.parents:
        raise GitRefused(400, f"Target path must be within {root}")
    if path.parent != root or path.name.startswith("."):
        raise GitRefused(
            400, f"Target path must be a directory directly in {root}, not starting with '.'"
        )
    if work_tree := next((up for up in path.parents if os.path.lexists(up / ".git")), None):
        raise GitRefused(400, f"Target path {path} would be inside the git checkout {work_tree}")
    return path


@dataclass(frozen=True, slots=True)
class GitRun:
    returncode: int
    stdout: str
    stderr: str


async def git(args: list[str], timeout_sec: float) -> GitRun:
    """`git <args>` (see `command`)."""
    return await command(["git", *args], timeout_sec)


async def command(
    argv: list[str],
    timeout_sec: float,
    cwd: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    whole: bool = False,
    stdin: str | None = None,
) -> GitRun:
    """`argv` run without a shell or the worker's secrets (`env` added), never prompting, in a
    process group of its own that is killed whole when the timeout passes (TimeoutError) or the
    call is cancelled; the tails of its output (`whole`: all of its stdout). `stdin`: its
    input (else none)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=without_secrets(os.environ) | GIT_ENV | dict(env or {}),
        start_new_session=True,
    )
    try:
        given = stdin.encode() if stdin is not None else None
        out, err = await asyncio.wait_for(process.communicate(given), timeout_sec)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    assert process.returncode is not None
    stdout = out.decode(errors="replace") if whole else _tail(out, STDOUT_LINES)
    return GitRun(process.returncode, stdout, _tail(err, STDERR_LINES))


async def check_out(checkout: Checkout) -> dict[str, Any]:
    """Clone the repository, or pull the checkout already there: the reference's answer.
    GitRefused: 409 (the target is something else, or became something else while it was
    cloned: `_confirm`), 504 (git timed out), 500 (no git)."""
    path = checkout.path
    pulling = path.exists()
    if pulling and not (path / ".git").exists():
        raise GitRefused(409, f"{path} exists and is not a git repository")
    if pulling:
        action, timeout, args = "pull", PULL_TIMEOUT_SEC, ["-C", str(path), "pull", "--ff-only"]
    else:
        branch = ["--branch", checkout.branch] if checkout.branch else []
        action, timeout = "clone", CLONE_TIMEOUT_SEC
        args = ["clone", *branch, "--", checkout.repo_url, str(path)]
    try:
        run = await git(args, timeout)
    except TimeoutError:
        raise GitRefused(504, f"git {action} timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise GitRefused(500, f"git could not be run: {exc}") from None
    if not pulling:
        _confirm(path)
    ok, rc = run.returncode == 0, run.returncode
    if pulling:
        detail = "Existing repo updated via git pull" if ok else f"Pull failed (rc={rc})"
    else:
        detail = "Cloned" if ok else f"Clone failed (rc={rc})"
    return {
        "ok": ok,
        "action": action,
        "path": str(path),
        "project_name": checkout.project_name,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "detail": detail,
    }


def _confirm(path: Path) -> None:
    """After a clone, `path` holds nothing (git failed) or is still the target checked
    (`target_in`), not a link; else the clone is refused (409) and what lies at `path` removed
    (a link unlinked, never followed), unless a link above it leads elsewhere (not ours)."""
    link = path.is_symlink()
    with contextlib.suppress(GitRefused):
        if not os.path.lexists(path) or (not link and target_in(path.parent, path.name) == path):
            return
    if link:
        path.unlink()
    elif path.resolve() == path:
        shutil.rmtree(path)
    else:
        raise GitRefused(409, f"Target path {path} now leads to {path.resolve()}: refused")
    raise GitRefused(409, f"Target path {path} changed during the clone: refused and removed")


def _tail(output: bytes, lines: int) -> str:
    return "\n".join(output.decode(errors="replace").splitlines()[-lines:])
