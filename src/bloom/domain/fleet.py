"""The fleet as Membridge lists it: reading its agents, and deciding who has gone quiet; and
each node's own agent key.

Membridge (ours, or the reference control plane) lists agents with float-second timestamps and
optional capabilities; the runtime keeps workers with millisecond timestamps. These functions
translate, tolerantly: an agent that cannot be read is skipped, never an error.
"""

import base64
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bloom.domain.models import DEFAULT_CAPABILITIES, Worker
from bloom.domain.states import WorkerStatus

AGENT_KEY_HEADER = "X-MEMBRIDGE-AGENT"
"""The header a node agent's key travels in, to the agent and from it (the reference's name)."""
NODE_KEY_PREFIX = "bloom_node_"


def node_agent_key(fleet_key: str, node_id: str) -> str:
    """The agent key of one node: derived from the fleet's agent key (which only the servers
    hold, and which is never sent) and the node's id, so what one node (or a listener posing as
    one) receives opens no other node. The node is configured with it (`bloom node key NAME`)."""
    digest = hmac.new(fleet_key.encode(), b"bloom-node-agent-key\0" + node_id.encode(), "sha256")
    return NODE_KEY_PREFIX + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def agent_key_header(fleet_key: str, node_id: str) -> dict[str, str]:
    """The header that authenticates a call to node `node_id`'s agent: its own key, or nothing
    when no fleet agent key is configured (a development fleet on one machine)."""
    return {AGENT_KEY_HEADER: node_agent_key(fleet_key, node_id)} if fleet_key else {}


WORKER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""A worker's name, which is its id in the runtime and its agent name in Membridge: URL-safe."""
WORKER_ID = re.compile(WORKER_NAME)
STATUSES = frozenset(str(status) for status in WorkerStatus)
MAX_CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent as Membridge reports it, in the runtime's units."""

    id: str
    url: str
    status: WorkerStatus
    capabilities: dict[str, Any]
    last_seen: int | None
    ip_addrs: list[str]


def epoch_ms(value: Any) -> int | None:
    """A timestamp in seconds (Membridge) or milliseconds, as epoch milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value) if value > 1e12 else int(value * 1000)


def parse_agent(raw: Any) -> Agent | None:
    """Read one entry of Membridge's `GET /agents`; None when it names no usable worker."""
    if not isinstance(raw, Mapping):
        return None
    name = raw.get("name") or raw.get("node_id") or raw.get("id")
    if not isinstance(name, str) or not WORKER_ID.fullmatch(name):
        return None
    given = raw.get("capabilities")
    caps: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    concurrency = caps.get("max_concurrency") or raw.get("max_concurrency") or 1
    labels = caps.get("labels") or raw.get("labels") or []
    status = raw.get("status")
    url = raw.get("url")
    ips = raw.get("ip_addrs")
    return Agent(
        id=name,
        url=url if isinstance(url, str) else "",
        status=WorkerStatus(status) if status in STATUSES else WorkerStatus.UNKNOWN,
        capabilities={
            "claude_cli": caps.get("claude_cli") is not False,
            "max_concurrency": _bounded(concurrency),
            "labels": [label for label in labels if isinstance(label, str)]
            if isinstance(labels, list)
            else [],
        },
        last_seen=epoch_ms(raw.get("last_seen")),
        ip_addrs=[ip for ip in ips if isinstance(ip, str)] if isinstance(ips, list) else [],
    )


@dataclass(frozen=True, slots=True)
class Sighting:
    """A node's latest heartbeat to Membridge (`GET /nodes`): a sign of life of the worker of
    the same name, even one that never registered with Membridge (the reference's agent
    registers with the runtime and only heartbeats Membridge)."""

    id: str
    seen_at: int
    """Epoch ms."""


def parse_sighting(raw: Any) -> Sighting | None:
    """Read one entry of Membridge's `GET /nodes`; None when it names no usable worker."""
    if not isinstance(raw, Mapping):
        return None
    name, seen = raw.get("node_id"), epoch_ms(raw.get("last_seen"))
    if not isinstance(name, str) or not WORKER_ID.fullmatch(name) or seen is None:
        return None
    return Sighting(name, seen)


def _bounded(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return int(DEFAULT_CAPABILITIES["max_concurrency"])
    return max(1, min(MAX_CONCURRENCY, int(value)))


def gone_quiet(workers: Iterable[Worker], listed: set[str], cutoff: int) -> list[Worker]:
    """Online workers with no sign of life since `cutoff`: neither listed by Membridge now or
    since then, nor heard from directly (registration, claim) since then."""
    return [
        worker
        for worker in workers
        if worker.status == WorkerStatus.ONLINE
        and worker.id not in listed
        and (worker.membridge_seen_at or 0) < cutoff
        and (worker.last_heartbeat or 0) < cutoff
    ]


@dataclass(frozen=True, slots=True)
class UrlChange:
    """What a proposed agent URL changes on a worker: the columns, and the audit action."""

    values: dict[str, str | None]
    action: str | None = None
    """`worker_url_set` or `worker_url_proposed` (AuditAction's texts); None: nothing to audit."""


def url_change(url: str, pending: str | None, proposed: str | None, *, trusted: bool) -> UrlChange:
    """A worker's agent URL (`url`, awaiting approval: `pending`) given `proposed` by a caller.

    Only a trusted caller (an admin) sets the URL the runtime calls. Anyone else (the worker's
    own key, Membridge's agent list) only proposes one, kept until an admin approves it, so no
    one but an admin points the runtime, with a node's key, at an address. Dropping the URL
    needs no approval: it only takes the node out of dispatch."""
    if proposed is None or (proposed == url and pending != proposed):
        return UrlChange({})
    if trusted or not proposed:
        values: dict[str, str | None] = {"url": proposed}
        if pending is not None and (pending == proposed or not proposed):
            values["pending_url"] = None
        return UrlChange(values, "worker_url_set" if proposed != url else None)
    if proposed == pending:
        return UrlChange({})
    return UrlChange({"pending_url": proposed}, "worker_url_proposed")
