"""The agent's process control (REFERENCE_BEHAVIOUR.md §4.7), served only by a worker started
with `--allow-process-control` and an agent key, for the runtime's agent-restart, agent-update
and agent-uninstall:

- restart: the worker drains (no new claims, running tasks finish within the drain time) and
  runs its own command line again in the same process (exec), whatever supervises it;
- self-update: the checkout it runs from is fast-forwarded (`git pull --ff-only`; a branch
  named must be the one checked out, where the node was installed from, or one an admin allowed
  in `BLOOM_WORKER_UPDATE_BRANCHES`) and its environment synced from the lock (`uv sync
  --frozen --no-dev`), then it restarts; a failed step is `ok: false` and nothing restarts;
- uninstall: the worker drains and exits 0, which its service does not restart (`Restart=
  on-failure`); disabling the service needs root, so the answer says how.
"""

import os
import shutil
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any, NoReturn

import bloom
from bloom import __version__
from bloom.worker.clone import GitRefused, GitRun, command, requested_branch

SERVICE = "bloom-worker"
PULL_TIMEOUT_SEC = 45.0
SYNC_TIMEOUT_SEC = 60.0
"""Both steps within the 120 s the runtime gives agent-update."""


def init_system() -> str:
    """What supervises services here: systemd, openrc, or none found."""
    if Path("/run/systemd/system").is_dir():
        return "systemd"
    if Path("/run/openrc").is_dir() or shutil.which("openrc-run"):
        return "openrc"
    return "none"


def running_checkout() -> Path | None:
    """The git checkout this bloom runs from (src/bloom's grandparent), if it is one."""
    root = Path(bloom.__file__).resolve().parents[2]
    return root if (root / ".git").exists() else None


def disable_hint() -> str:
    if init_system() == "openrc":
        return f"rc-update del {SERVICE} default"
    return f"systemctl disable {SERVICE}"


async def self_update(
    checkout: Path, branch: str | None, allowed: Collection[str] = ()
) -> dict[str, Any]:
    """Fast-forward `checkout` (to `origin`'s branch `branch` when given: the one it has
    checked out, or one of `allowed`) and sync its environment; the reference's answer `{ok,
    version, old_commit, new_commit, steps, detail}`. GitRefused: 400 `branch` is not a plain
    branch name, 403 it is not one this checkout follows."""
    branch = requested_branch(branch)
    if not (checkout / ".git").exists():
        return {"ok": False, "steps": [], "detail": f"{checkout} is not a git checkout"}
    if branch is not None:
        installed = await _git_line(checkout, "symbolic-ref", "--quiet", "--short", "HEAD")
        if branch != installed and branch not in allowed:
            raise GitRefused(
                403,
                f"branch {branch!r} is not followed here: self-update follows the branch this "
                f"worker was installed from ({installed or 'none: its checkout is detached'}) "
                f"and those an admin lists in BLOOM_WORKER_UPDATE_BRANCHES "
                f"({', '.join(allowed) or 'none'})",
            )
    old = await _commit(checkout)
    onto = ["origin", f"refs/heads/{branch}"] if branch else []
    pull = ["git", "-C", str(checkout), "pull", "--ff-only", *onto]
    steps = [await _step("git pull", pull, PULL_TIMEOUT_SEC)]
    uv = _uv(checkout)
    if steps[-1]["ok"] and (checkout / "uv.lock").exists():
        if uv is None:
            steps.append({"step": "uv sync", "ok": False, "stderr": "uv not found"})
        else:
            sync = [uv, "sync", "--frozen", "--no-dev", "--quiet"]
            steps.append(await _step("uv sync", sync, SYNC_TIMEOUT_SEC, cwd=checkout))
    ok = all(step["ok"] for step in steps)
    failed = next((step["step"] for step in steps if not step["ok"]), None)
    return {
        "ok": ok,
        "version": __version__,
        "old_commit": old,
        "new_commit": await _commit(checkout),
        "steps": steps,
        "detail": "Self-update completed: restarting" if ok else f"{failed} failed",
    }


def reexec() -> NoReturn:
    """Run this process's command line again, in place (same pid, same environment)."""
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606 (our own argv)


async def _step(name: str, argv: list[str], timeout_sec: float, cwd: Path | None = None) -> Any:
    try:
        run = await command(argv, timeout_sec, cwd)
    except TimeoutError:
        run = GitRun(-1, "", f"timed out after {timeout_sec:.0f} s")
    except OSError as exc:
        run = GitRun(-1, "", f"could not be run: {exc}")
    return {
        "step": name,
        "ok": run.returncode == 0,
        "returncode": run.returncode,
        "stdout": run.stdout,
        "stderr": run.stderr,
    }


async def _commit(checkout: Path) -> str | None:
    return await _git_line(checkout, "rev-parse", "HEAD")


async def _git_line(checkout: Path, *args: str) -> str | None:
    """What `git <args>` prints in `checkout`; None when it fails."""
    try:
        run = await command(["git", "-C", str(checkout), *args], 10.0)
    except (TimeoutError, OSError):
        return None
    return run.stdout.strip() or None if run.returncode == 0 else None


def _uv(checkout: Path) -> str | None:
    bootstrapped = checkout / ".cache" / "uv-bootstrap" / "bin" / "uv"
    return str(bootstrapped) if bootstrapped.exists() else shutil.which("uv")
