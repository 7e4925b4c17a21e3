"""Pure rules of the control plane: node roles, the project listing.

No I/O, and time is passed in (epoch milliseconds), so every rule is testable on its own.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from bloom.membridge.models import HeartbeatProject, Leadership, Project


class Role(StrEnum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    UNKNOWN = "unknown"


def in_force(leadership: Leadership | None, now: int) -> bool:
    """Whether a leadership choice exists and has not expired at `now`."""
    return leadership is not None and now < leadership.expires_at


def role_of(node_id: str, leadership: Leadership | None, now: int) -> Role:
    """A node's role at `now`: while a choice is in force, its primary is `primary` and every
    other node `secondary`; with no choice, or an expired one, nobody knows (`unknown`)."""
    if leadership is None or not in_force(leadership, now):
        return Role.UNKNOWN
    return Role.PRIMARY if node_id == leadership.primary_node_id else Role.SECONDARY


def expires_at(issued_at: int, lease_seconds: int) -> int:
    return issued_at + lease_seconds * 1000


@dataclass(frozen=True, slots=True)
class ProjectEntry:
    """One line of `GET /projects`."""

    name: str
    canonical_id: str
    created_at: int | None
    last_seen: int | None
    nodes_count: int
    source: str


def project_listing(
    manual: Iterable[Project],
    heartbeat: Iterable[HeartbeatProject],
    nodes_per_project: Mapping[str, int],
) -> list[ProjectEntry]:
    """Manual projects first (with the heartbeat record's `last_seen`), then the projects only
    heartbeats know of, named by the project id the nodes reported."""
    reported = {record.canonical_id: record for record in heartbeat}
    entries = []
    for project in manual:
        record = reported.get(project.canonical_id)
        entries.append(
            ProjectEntry(
                name=project.name,
                canonical_id=project.canonical_id,
                created_at=project.created_at,
                last_seen=record.last_seen if record else None,
                nodes_count=nodes_per_project.get(project.canonical_id, 0),
                source="manual",
            )
        )
    listed = {entry.canonical_id for entry in entries}
    for record in reported.values():
        if record.canonical_id in listed:
            continue
        entries.append(
            ProjectEntry(
                name=record.project_id,
                canonical_id=record.canonical_id,
                created_at=None,
                last_seen=record.last_seen,
                nodes_count=nodes_per_project.get(record.canonical_id, 0),
                source="heartbeat",
            )
        )
    return entries
