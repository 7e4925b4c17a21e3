"""Agent CLIs shipped as npm packages: the version installed in a cache directory, fetching a
pinned version there (`bloom agents install`, `bloom claude install`), and what a binary says
its version is. Each adapter's `install` module says which package, how big, and where its
binary is in the package; one whose package puts a launcher in `node_modules/.bin` (Codex,
Gemini) is a `Launcher`, found and fetched alike."""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
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


@dataclass(frozen=True, slots=True)
class Launcher:
    """A CLI whose npm package puts a launcher in `node_modules/.bin` (Codex, Gemini): where
    the operator's variable, PATH or the project's cache has it, and fetching it there."""

    package: Package
    pinned_version: str
    cache_env: str
    """The variable that moves the cache (`BLOOM_<CLI>_CACHE`)."""
    default_cache: Path
    """`./.cache/<cli>-cli`."""

    def cache_dir(self, environ: Mapping[str, str] | None = None) -> Path:
        """Where the fetched CLI lives: the cache variable, or the default."""
        env = os.environ if environ is None else environ
        return Path(env.get(self.cache_env) or self.default_cache)

    def installed_version(self, cache: Path) -> str | None:
        """The version of the package installed in `cache`, or None."""
        return installed_version(cache, self.package.name)

    def cached_binary(self, cache: Path, version: str | None = None) -> Path | None:
        """The launcher in `cache` when the pinned version (or `version`) is installed there."""
        if self.installed_version(cache) != (version or self.pinned_version):
            return None
        launcher = cache / "node_modules" / ".bin" / self.package.binary
        if launcher.is_file() and os.access(launcher, os.X_OK):
            return launcher.absolute()
        return None

    def configured(self, environ: Mapping[str, str] | None = None) -> str | None:
        """What the operator's variable (`Package.bin_env`) names, when set: it wins."""
        env = os.environ if environ is None else environ
        return env.get(self.package.bin_env) or None

    def find(self, environ: Mapping[str, str] | None = None) -> tuple[Path, str] | None:
        """The CLI to run and how it was found ("configured", "path", "cache"), or None."""
        env = os.environ if environ is None else environ
        chosen = self.configured(env)
        if chosen:
            path = shutil.which(chosen, path=env.get("PATH"))
            return (Path(path), "configured") if path else None
        on_path = shutil.which(self.package.binary, path=env.get("PATH"))
        if on_path:
            return Path(on_path), "path"
        cached = self.cached_binary(self.cache_dir(env))
        return (cached, "cache") if cached else None

    def install(
        self,
        cache: Path,
        echo: Callable[[str], None],
        *,
        failure: type[Exception],
        version: str | None = None,
        npm: str | None = None,
    ) -> Path:
        """Fetch the CLI into `cache` with npm (its output goes to our stderr); its launcher."""
        return install(
            self.package,
            cache,
            version or self.pinned_version,
            echo,
            located=self.cached_binary,
            failure=failure,
            npm=npm,
        )

    def found(self, environ: Mapping[str, str]) -> tuple[Path, str | None, str] | None:
        """Where the CLI is, its version (the cache's package manifest, else what the binary
        says) and how it was found (as `base.Found` takes them), or None."""
        where = self.find(environ)
        if where is None:
            return None
        path, source = where
        cached = source == "cache"
        version = self.installed_version(self.cache_dir(environ)) if cached else self.version(path)
        return path, version, source

    def version(self, binary: str | Path) -> str | None:
        """The version of the CLI at `binary`: its npm package's manifest when `binary` is the
        package's launcher (read, not run: Gemini's `--version` takes seconds), else what
        `<binary> --version` says."""
        located = shutil.which(str(binary))
        if located is None:
            return None
        script = Path(located).resolve()
        for folder in list(script.parents)[:3]:
            try:
                manifest = json.loads((folder / "package.json").read_text())
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict) and manifest.get("name") == self.package.name:
                found = manifest.get("version")
                return found if isinstance(found, str) else None
        return version_of(located)

    def resolved(self, binary: str) -> str | None:
        """The binary a worker runs: `binary` when the operator set it (a path, or a name on
        PATH), else the CLI on PATH, else the pinned one in the cache; None when there is none."""
        if binary:
            return binary if shutil.which(binary) else None
        where = self.find({**os.environ, self.package.bin_env: ""})
        return str(where[0]) if where else None
