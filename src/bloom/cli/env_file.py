"""The env file a deployed service reads its settings from: `BLOOM_ENV_FILE`, checked, then read.

The service managers (the systemd units and OpenRC scripts of `deploy/`) pass the `bloom`
process only the file's path; the process reads the file itself, so both init systems read it
alike (one `KEY=value` a line, `#` comments, blank lines, an optional `export `, a value in
matching quotes taken without them; no expansion, no inline comments). A variable already set in
the process's environment wins over the file, as a variable given on a command line should.

The file holds secrets (the API key, the database password), so it is refused before it is read
when group or others may read or change it, or (for a process not run by root) when it belongs
to someone other than the process's user or root: one line naming the file and the fix, exit
status 2. Every `bloom`
command honours it, so `BLOOM_ENV_FILE=/etc/bloom-runtime.env bloom db upgrade` runs with the
service's settings.
"""

import os
import pwd
import re
import stat
from collections.abc import MutableMapping
from pathlib import Path

ENV_FILE = "BLOOM_ENV_FILE"
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PRIVATE_BITS = 0o077


class EnvFileError(ValueError):
    """The env file cannot be used; the message names it and says what to do."""


def load_env_file(environ: MutableMapping[str, str]) -> Path | None:
    """Read the file `BLOOM_ENV_FILE` names (when it names one) into `environ`, filling only
    what `environ` does not already set. Returns the file's path."""
    named = environ.get(ENV_FILE, "").strip()
    if not named:
        return None
    path = Path(named)
    check_private(path)
    try:
        text = path.read_text(encoding="utf-8")
    except PermissionError:
        raise EnvFileError(
            f"cannot read {path} ({ENV_FILE}): permission denied; it must belong to the "
            f"service's user: chown {_user_name()} {path}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileError(f"cannot read {path} ({ENV_FILE}): {exc}") from None
    for key, value in parse_env_file(text, str(path)).items():
        if not environ.get(key):
            environ[key] = value
    return path


def check_private(path: Path) -> None:
    """Refuse a file that group or others may read or change, or that belongs to a third user
    (who could change it): neither this process's nor root (root may read the service's)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise EnvFileError(f"{path} ({ENV_FILE}) does not exist") from None
    except OSError as exc:
        raise EnvFileError(f"cannot check {path} ({ENV_FILE}): {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise EnvFileError(f"{path} ({ENV_FILE}) is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & PRIVATE_BITS:
        raise EnvFileError(
            f"{path} holds secrets but group or others may read or change it (mode {mode:04o}): "
            f"chmod 600 {path}"
        )
    if os.geteuid() != 0 and info.st_uid not in (0, os.geteuid()):
        raise EnvFileError(
            f"{path} holds secrets but belongs to uid {info.st_uid}, neither this service's "
            f"user nor root: chown {_user_name()} {path}"
        )


def parse_env_file(text: str, name: str = "env file") -> dict[str, str]:
    """`KEY=value` lines into a dict; a line of another shape is an error naming it."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line.removeprefix("export ").lstrip()
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not KEY.fullmatch(key):
            raise EnvFileError(f"{name}:{number}: expected KEY=value")
        values[key] = _unquoted(value.strip())
    return values


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
