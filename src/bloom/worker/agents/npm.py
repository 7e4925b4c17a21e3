"""Agent CLIs shipped as npm packages: the version installed in a cache directory, fetching a
pinned version there (`bloom agents install`, `bloom claude install`), and what a binary says
its version is. Each adapter's `install` module says which package, how big, and where its
binary is in the package."""

import json
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VERSION = re.compile(r"\d+\.\d+\.\d+\S*")
VERSION_TIMEOUT_SEC = 10.0


def version_of(binary: str | Path) -> str | None:
    """What `<binary> --version` says its version is (blocking; no model is called)."""
    try:
        done = subprocess.run(  # noqa: S603 - our fixed argv, no shell
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SEC,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = VERSION.search(done.stdout) if done.returncode == 0 else None
    return found.group(0) if found else None


@dataclass(frozen=True, slots=True)
class Package:
    """One CLI's npm package."""

    name: str
    """npm's name, e.g. `@openai/codex`."""
    title: str
    """The CLI's name for people: "Claude", "Codex"."""
    approx_size: str
    bin_env: str
    """The worker setting that names the binary instead (said in errors)."""
    binary: str
    """The binary's name."""


def installed_version(cache: Path, package: str) -> str | None:
    """The version of `package` installed in `cache`, or None."""
    manifest = cache / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def install(
    package: Package,
    cache: Path,
    version: str,
    echo: Callable[[str], None],
    *,
    located: Callable[[Path, str], Path | None],
    failure: type[Exception],
    npm: str | None = None,
) -> Path:
    """Fetch `package@version` into `cache` with npm (its output goes to our stderr); the
    binary's path as `located` finds it. `failure` (with a message saying what to do) when npm
    is missing, fails, or leaves no binary for this platform."""
    npm = npm or shutil.which("npm")
    if npm is None:
        raise failure(
            f"the {package.title} CLI is not installed and npm is not there to fetch it: install "
            "Node.js 18 or newer with npm (e.g. `apt-get install nodejs npm`, or "
            f"https://nodejs.org), or set {package.bin_env} to a {package.binary} binary"
        )
    cache.mkdir(parents=True, exist_ok=True)
    echo(
        f"Fetching the {package.title} CLI {version} into {cache} with npm "
        f"({package.approx_size}) …"
    )
    command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache)]
    try:
        done = subprocess.run(  # noqa: S603 - our fixed argv, no shell
            [*command, f"{package.name}@{version}"], stdout=sys.stderr, check=False
        )
    except OSError as exc:
        raise failure(f"could not run npm ({npm}): {exc}") from None
    if done.returncode != 0:
        raise failure(
            f"npm install {package.name}@{version} failed (exit status {done.returncode}); "
            f"see its output above, or set {package.bin_env} to a {package.binary} binary"
        )
    binary = located(cache, version)
    if binary is None:
        raise failure(
            f"npm installed {package.name}@{version} into {cache}, but no {package.binary} "
            f"binary for this platform ({sys.platform}, {platform.machine()}) is there; set "
            f"{package.bin_env}"
        )
    echo(f"{package.title} CLI {version} ready: {binary}")
    return binary
