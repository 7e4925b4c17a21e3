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
    APPROVER = "approver"
    """Reads as a viewer does, and decides approvals (docs/approvals.md)."""


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
    label: str = ""
    """A user's username; a key's name."""

    @property
    def name(self) -> str:
        """Who this is, for people: a user's username, a key's `key:<name>` (a worker key's
        worker), "admin" for the admin key, an anonymous caller's address."""
        if self.kind is Kind.USER:
            return self.label
        if self.kind is Kind.KEY:
            return self.worker_id or f"key:{self.label}"
        return self.id

    @property
    def actor(self) -> str | None:
        """Whom the changes this caller makes are audited as: a named caller (a user, a key) by
        its name; None for the admin key and open mode's callers, whose changes keep the seed's
        actors ("api", "admin")."""
        return self.name if self.kind in (Kind.USER, Kind.KEY) else None

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
