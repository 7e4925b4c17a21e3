"""The control plane's entities, as storage returns them and services pass them around.

Timestamps are Unix epoch milliseconds, as in every BLOOM table; the HTTP layer shows them as
float seconds, the reference control plane's convention.
"""

from dataclasses import dataclass
from typing import Any

AGENT_STATUSES = ("online", "offline", "syncing", "error", "unknown")
DEFAULT_CAPABILITIES: dict[str, Any] = {"claude_cli": True, "max_concurrency": 1, "labels": []}


@dataclass(frozen=True, slots=True)
class Agent:
    """A registered agent (a worker machine), keyed by name."""

    name: str
    url: str
    status: str
    capabilities: dict[str, Any]
    registered_at: int
    updated_at: int
    last_seen: int | None


@dataclass(frozen=True, slots=True)
class Project:
    """A project an operator created by name."""

    name: str
    canonical_id: str
    created_at: int


@dataclass(frozen=True, slots=True)
class Node:
    """One node's latest heartbeat for one project (canonical id)."""

    canonical_id: str
    node_id: str
    obs_count: int | None
    db_sha: str | None
    last_seen: int
    """When the control plane last heard from the node (its own clock)."""
    reported_last_seen: int | None
    """The `last_seen` the node reported about itself, kept apart: it may be stale."""
    ip_addrs: list[str]
    registered_at: int
    project_id: str | None
    agent_version: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatProject:
    """A project as heartbeats name it: the last node that reported it, and when."""

    canonical_id: str
    project_id: str
    node_id: str
    last_seen: int


@dataclass(frozen=True, slots=True)
class Leadership:
    """The operator's choice of primary node for a project, for a limited time.

    `epoch` counts the choices made for the project (1 for the first); a node that remembers the
    epoch it was given can tell a newer choice from the one it knows.
    """

    canonical_id: str
    primary_node_id: str
    epoch: int
    lease_seconds: int
    issued_at: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class Job:
    """A sync job (the reference's `jobs` table): what was asked of which agent, and how it went."""

    id: str
    action: str
    project: str
    agent: str
    canonical_id: str
    status: str
    detail: str | None
    stdout: str | None
    stderr: str | None
    returncode: int | None
    dryrun: bool
    created_at: int
    finished_at: int | None
    request_id: str | None
