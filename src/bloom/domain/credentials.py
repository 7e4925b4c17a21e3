"""API keys and user passwords: how they are made, stored (as hashes) and checked (pure).

An API key is `bloom_<role>_<43 random url-safe characters>`: 256 bits, so a plain SHA-256 of
it is a safe thing to store and to look up by. Passwords are people's, so they are stored as
scrypt hashes with a salt of their own and checked in constant time. Failed logins lock a name
and an address out for a while (`LoginPolicy`).
"""

import base64
import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass, field

from bloom.domain.identity import Role
from bloom.domain.retry import RetryPolicy

KEY_PREFIX_CHARS = 14
"""What `bloom key list` shows of a key: enough to recognise it, nothing to use."""
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD_CHARS = 10


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    name: str
    role: str
    key_hash: str
    prefix: str
    worker_id: str | None
    created_at: int
    revoked_at: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class User:
    id: str
    username: str
    password: str
    """The scrypt hash (the seed's column name)."""
    role: str
    created_at: int


def new_key(role: Role) -> str:
    return f"bloom_{role}_{secrets.token_urlsafe(32)}"


def hash_key(key: str | bytes) -> str:
    raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def key_prefix(key: str) -> str:
    return key[:KEY_PREFIX_CHARS]


def _stored(salt: bytes, digest: bytes) -> str:
    encoded = [base64.b64encode(part).decode() for part in (salt, digest)]
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${encoded[0]}${encoded[1]}"


DECOY_HASH = _stored(b"decoy-salt-bytes", bytes(32))
"""Checked against when a user does not exist, at the cost of a real password's check, so that
a wrong name costs as much as a wrong password and the time taken does not tell which names
exist. No password matches it (its digest is 32 zero bytes)."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return _stored(salt, digest)


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` matches the stored hash; False for anything malformed."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode("utf-8", "surrogatepass"),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def password_problem(password: str) -> str | None:
    """Why `password` is not acceptable, or None."""
    if len(password) < MIN_PASSWORD_CHARS:
        return f"must be at least {MIN_PASSWORD_CHARS} characters"
    return None


@dataclass(frozen=True, slots=True)
class LoginPolicy:
    """When failed logins lock out a user name, or a client address, and for how long.

    The failure that reaches the limit locks it for `backoff.base_ms`, each further one for
    twice as long as the one before, up to `backoff.max_ms`; failures are counted for
    `window_sec` from the first.
    """

    max_failures_per_user: int = 5
    max_failures_per_address: int = 20
    backoff: RetryPolicy = field(default_factory=lambda: RetryPolicy(base_ms=2_000, max_ms=900_000))
    window_sec: int = 3600

    def lockout_sec(self, failures: int, limit: int) -> int:
        """How long `failures` failures (this one counted) lock out their subject: 0 below
        `limit`."""
        if failures < limit:
            return 0
        return math.ceil(self.backoff.backoff_ms(failures - limit + 1) / 1000)
