"""The server's own secret: signs login cookies, and (derived) encrypts secrets at rest.

From `BLOOM_SECRET_KEY` when set; otherwise made once at random and kept in
`<data dir>/secret.key`, readable by its owner only, so that logins and stored secrets survive
a restart. Several runtime processes sharing one database must share this key: set it.
"""

import hashlib
import os
import secrets
from pathlib import Path

from bloom.runtime.settings import RuntimeSettings

FILE_NAME = "secret.key"


def server_secret(settings: RuntimeSettings) -> bytes:
    """This server's secret key, as its settings say where to find it."""
    configured = settings.secret_key.get_secret_value() if settings.secret_key else None
    return resolve_secret_key(configured, settings.data_dir)


def resolve_secret_key(configured: str | None, data_dir: Path) -> bytes:
    if configured:
        return configured.encode()
    path = data_dir / FILE_NAME
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48).encode()
    temporary = data_dir / f".{FILE_NAME}.{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key)
    try:
        os.link(temporary, path)  # atomic, and fails if another process made one first
    except FileExistsError:
        key = path.read_bytes().strip()
    finally:
        temporary.unlink()
    return key


def derive(key: bytes, purpose: str) -> bytes:
    """A 32-byte key for one purpose ("session", "encryption"), so that no two uses share one."""
    return hashlib.sha256(purpose.encode() + b"\0" + key).digest()
