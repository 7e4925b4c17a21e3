"""Who is calling: the identity every request is resolved to, and the roles (pure)."""

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    """Everything: the seed's RUNTIME_API_KEY, and admin keys and users."""
    WORKER = "worker"
    """Register, claim, heartbeat, send events and complete, for its own worker and leases only."""
    VIEWER = "viewer"
    """Read-only."""


class Kind(StrEnum):
    ADMIN_KEY = "admin_key"
    """The configured RUNTIME_API_KEY."""
    KEY = "key"
    """A key created with `bloom key create`."""
    USER = "user"
    """A logged-in user (the login cookie) created with `bloom user create`."""
    ANONYMOUS = "anonymous"
    """No (valid) credentials: known only by the client's address."""


@dataclass(frozen=True, slots=True)
class Identity:
    kind: Kind
    id: str
    """The key's id, the user's id, "admin", or the client's address."""
    role: Role | None
    worker_id: str | None = None
    """For a worker key: the one worker it may act as."""

    @property
    def rate_key(self) -> str:
        """The bucket this identity's requests are counted in."""
        return f"{self.kind}:{self.id}"


def anonymous(address: str) -> Identity:
    return Identity(Kind.ANONYMOUS, address, None)


def open_access(address: str) -> Identity:
    """Who a caller is while no admin key is configured (the seed's development mode): anyone
    may do anything, and is counted by address."""
    return Identity(Kind.ANONYMOUS, address, Role.ADMIN)
