"""Memory sync's pure rules: the bucket layout and documents of the reference tool
(REFERENCE_BEHAVIOUR.md §5.2 to 5.4: manifest, lease, push lock), a node's role from the lease, the
push lock's verdict, the pull backups' retention, and the exit codes.

Times are epoch seconds, as in those documents; `now` is always passed in.
"""

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, Self

DB_NAME = "claude-mem.db"
MEMORY_TABLES = ("observations", "session_summaries", "user_prompts")
"""The claude-mem plugin's tables a snapshot must hold (and whose rows the manifest counts)."""
LEASE_POLICY = "primary_authoritative"


class ExitCode(IntEnum):
    """The reference tool's exit statuses, kept so hooks and scripts read ours alike."""

    OK = 0
    ERROR = 1
    PRIMARY_REFUSED_PULL = 2
    SECONDARY_BLOCKED_PUSH = 3


class Role(StrEnum):
    PRIMARY = "primary"
    SECONDARY = "secondary"


@dataclass(frozen=True, slots=True)
class Keys:
    """Where a project's objects live in the bucket (§5.2), by its canonical id."""

    canonical_id: str

    @property
    def prefix(self) -> str:
        return f"projects/{self.canonical_id}"

    @property
    def db(self) -> str:
        return f"{self.prefix}/sqlite/{DB_NAME}"

    @property
    def sha256(self) -> str:
        return f"{self.db}.sha256"

    @property
    def manifest(self) -> str:
        return f"{self.prefix}/sqlite/manifest.json"

    @property
    def lock(self) -> str:
        return f"{self.prefix}/locks/active.lock"

    @property
    def lease(self) -> str:
        return f"{self.prefix}/leadership/lease.json"

    def snapshot(self, sha256: str) -> str:
        """Ours: a snapshot under its digest, written before anything is published."""
        return f"{self.prefix}/sqlite/snapshots/{sha256}.db"

    def audit(self, now: int, node_id: str, epoch: int) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        safe = node_id.replace("/", "_").replace(":", "_")
        return f"{self.prefix}/leadership/audit/{stamp}-{safe}-e{epoch}.json"


def sha256_text(sha256: str) -> bytes:
    """The `.sha256` object's content, as `sha256sum` writes it."""
    return f"{sha256}  {DB_NAME}\n".encode()


def parse_sha256_text(data: bytes) -> str | None:
    """The digest of a `.sha256` object (its first token), None when it holds none."""
    token = next(iter(data.decode("utf-8", "replace").split()), "").lower()
    return token if len(token) == 64 and all(c in "0123456789abcdef" for c in token) else None


def iso_utc(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def _int(doc: Mapping[str, Any], name: str, what: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: {name} is missing or not a number")
    return int(value)


def _str(doc: Mapping[str, Any], name: str, what: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{what}: {name} is missing or not text")
    return value


@dataclass(frozen=True, slots=True)
class Counts:
    """Rows of the three memory tables, and the number of tables, in one database."""

    observations: int
    session_summaries: int
    user_prompts: int
    tables: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """`manifest.json`: the reference's fields, and two of ours that it ignores (the epoch the
    snapshot was pushed under, the key of its content-addressed copy). Readers trust only a
    manifest whose `sha256` matches the bytes they downloaded."""

    project: str
    canonical_id: str
    timestamp: str
    source_host: str
    db_size: int
    sha256: str
    observations: int
    session_summaries: int
    user_prompts: int
    tables: int
    epoch: int | None = None
    snapshot: str | None = None

    def to_json(self) -> bytes:
        doc = {k: v for k, v in asdict(self).items() if v is not None}
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        doc, what = _loads(data, "manifest.json"), "manifest.json"
        sha = _str(doc, "sha256", what).lower()
        if parse_sha256_text(sha.encode()) != sha:
            raise ValueError(f"{what}: sha256 is not a SHA-256 digest")
        epoch, snapshot = doc.get("epoch"), doc.get("snapshot")
        return cls(
            project=str(doc.get("project", "")),
            canonical_id=str(doc.get("canonical_id", "")),
            timestamp=str(doc.get("timestamp", "")),
            source_host=str(doc.get("source_host", "")),
            db_size=_int(doc, "db_size", what),
            sha256=sha,
            observations=_int(doc, "observations", what, 0),
            session_summaries=_int(doc, "session_summaries", what, 0),
            user_prompts=_int(doc, "user_prompts", what, 0),
            tables=_int(doc, "tables", what, 0),
            epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
            snapshot=snapshot if isinstance(snapshot, str) and snapshot else None,
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """`leadership/lease.json` (§5.3): who is the project's primary until when, and the epoch,
    which grows by one with every change of hands (a renewal keeps it)."""

    canonical_id: str
    primary_node_id: str
    issued_at: int
    expires_at: int
    lease_seconds: int
    epoch: int
    issued_by: str
    policy: str = LEASE_POLICY
    needs_ui_selection: bool = False

    def valid_at(self, now: int) -> bool:
        return now < self.expires_at

    def role_of(self, node_id: str) -> Role:
        return Role.PRIMARY if node_id == self.primary_node_id else Role.SECONDARY

    def to_json(self) -> bytes:
        doc = asdict(self)
        if not self.needs_ui_selection:
            del doc["needs_ui_selection"]
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        doc, what = _loads(data, "lease.json"), "lease.json"
        return cls(
            canonical_id=str(doc.get("canonical_id", "")),
            primary_node_id=_str(doc, "primary_node_id", what),
            issued_at=_int(doc, "issued_at", what),
            expires_at=_int(doc, "expires_at", what),
            lease_seconds=_int(doc, "lease_seconds", what),
            epoch=_int(doc, "epoch", what),
            issued_by=str(doc.get("issued_by", "")),
            policy=str(doc.get("policy", LEASE_POLICY)),
            needs_ui_selection=bool(doc.get("needs_ui_selection", False)),
        )


@dataclass(frozen=True, slots=True)
class LeaseStep:
    """What a node concludes from the lease it read: its role, once `write` (if any) has been
    stored by compare-and-swap against what was read."""

    role: Role
    write: Lease | None = None


def next_lease(
    current: Lease | None,
    *,
    canonical_id: str,
    node_id: str,
    preferred: str,
    lease_seconds: int,
    now: int,
) -> LeaseStep:
    """A node's role and the lease it must write first (REFERENCE_BEHAVIOUR.md §5.3, made safe).

    - No lease: the preferred node (`PRIMARY_NODE_ID`), else this one, gets epoch 1.
    - A valid lease decides the role; its primary renews it once half its time is gone.
    - An expired lease goes, with the next epoch, to the preferred node when that is this one,
      or back to its own primary when no node is preferred; anyone else stays secondary (the
      control plane chooses: `needs_ui_selection`).
    """

    def issue(primary: str, epoch: int, needs_ui_selection: bool = False) -> Lease:
        return Lease(
            canonical_id=canonical_id,
            primary_node_id=primary,
            issued_at=now,
            expires_at=now + lease_seconds,
            lease_seconds=lease_seconds,
            epoch=epoch,
            issued_by=node_id,
            needs_ui_selection=needs_ui_selection,
        )

    if current is None:
        lease = issue(preferred or node_id, 1, needs_ui_selection=not preferred)
        return LeaseStep(lease.role_of(node_id), lease)
    if current.valid_at(now):
        role = current.role_of(node_id)
        half_gone = current.expires_at - now <= current.lease_seconds / 2
        if role is Role.PRIMARY and half_gone:
            return LeaseStep(role, issue(node_id, current.epoch, current.needs_ui_selection))
        return LeaseStep(role)
    if preferred == node_id or (not preferred and current.primary_node_id == node_id):
        return LeaseStep(Role.PRIMARY, issue(node_id, current.epoch + 1))
    return LeaseStep(Role.SECONDARY)


def chosen_lease(
    current: Lease | None,
    *,
    canonical_id: str,
    primary_node_id: str,
    lease_seconds: int,
    issued_by: str,
    now: int,
    min_epoch: int = 0,
) -> Lease:
    """An operator's choice of primary (the control plane's select): the next epoch after both
    the stored lease's and `min_epoch` (the control plane's own count)."""
    epoch = max(current.epoch if current else 0, min_epoch) + 1
    return Lease(
        canonical_id=canonical_id,
        primary_node_id=primary_node_id,
        issued_at=now,
        expires_at=now + lease_seconds,
        lease_seconds=lease_seconds,
        epoch=epoch,
        issued_by=issued_by,
    )


def lease_audit(lease: Lease, event: str, now: int) -> bytes:
    """An audit object's content: the lease as written, the event and when (§5.2)."""
    return json.dumps({**asdict(lease), "event": event, "timestamp": iso_utc(now)}).encode()


@dataclass(frozen=True, slots=True)
class PushLock:
    """`locks/active.lock`: the reference's fields (`hostname`, `timestamp`), the node id and
    the leadership epoch it was taken under."""

    hostname: str
    timestamp: int
    project: str
    canonical_id: str
    node_id: str = ""
    epoch: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        doc, what = _loads(data, "active.lock"), "active.lock"
        return cls(
            hostname=_str(doc, "hostname", what),
            timestamp=_int(doc, "timestamp", what),
            project=str(doc.get("project", "")),
            canonical_id=str(doc.get("canonical_id", "")),
            node_id=str(doc.get("node_id", "")),
            epoch=_int(doc, "epoch", what, 0),
        )

    def holder(self) -> str:
        return self.node_id or self.hostname


class LockVerdict(StrEnum):
    FREE = "free"
    MINE = "mine"
    HELD = "held"
    STALE = "stale"


def lock_verdict(
    lock: PushLock | None,
    *,
    node_id: str,
    epoch: int,
    now: int,
    ttl: int,
    grace: int,
    force: bool,
) -> LockVerdict:
    """Whether a push may take the lock (§5.4): free, its own, forced, taken under an older
    epoch (its holder lost leadership since) or expired past the grace period (stale: taken
    over); otherwise held by another pusher."""
    if lock is None:
        return LockVerdict.FREE
    if lock.holder() == node_id:
        return LockVerdict.MINE
    if force or lock.epoch < epoch or now - lock.timestamp > ttl + grace:
        return LockVerdict.STALE
    return LockVerdict.HELD


@dataclass(frozen=True, slots=True)
class Backup:
    name: str
    made_at: float


def expired_backups(
    backups: Iterable[Backup], *, now: float, max_days: int, max_count: int
) -> list[str]:
    """The pull backups to delete (§5.6): older than `max_days`, then the oldest beyond
    `max_count`."""
    newest_first = sorted(backups, key=lambda b: b.made_at, reverse=True)
    too_old = {b.name for b in newest_first if now - b.made_at > max_days * 86_400}
    kept = [b for b in newest_first if b.name not in too_old]
    return sorted(too_old) + [b.name for b in kept[max_count:]]


@dataclass(frozen=True, slots=True)
class Report:
    """What a sync command did: its exit code, one line for a person, and the details."""

    code: ExitCode
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code is ExitCode.OK
