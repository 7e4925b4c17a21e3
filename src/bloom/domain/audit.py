"""The audit trail's words: what happened (`AuditAction`, stored and shown as its text) and one
builder per kind of thing it happened to, so an entry names its subject the same way everywhere."""

from enum import StrEnum

from bloom.domain.ids import new_id
from bloom.domain.models import AuditEntry, Lease


class AuditAction(StrEnum):
    TASK_CREATED = "task_created"
    TASK_LEASED = "task_leased"
    TASK_RUNNING = "task_running"
    TASK_COMPLETED = "task_completed"
    TASK_RETRY_SCHEDULED = "task_retry_scheduled"
    TASK_FAILED = "task_failed"
    TASK_DEAD = "task_dead"
    TASK_CANCELLED = "task_cancelled"
    TASK_CANCEL_REQUESTED = "task_cancel_requested"
    TASK_REQUEUED = "task_requeued"
    TASK_STALLED = "task_stalled"
    TASK_DISPATCHED = "task_dispatched"
    TASK_RELEASED = "task_released"
    TASK_REBLOCKED = "task_reblocked"
    DISPATCH_FAILED = "dispatch_failed"
    AGENT_UPDATED = "agent_updated"
    AGENT_RESTARTED = "agent_restarted"
    AGENT_UNINSTALLED = "agent_uninstalled"
    INSTALL_SCRIPT_SERVED = "install_script_served"
    LEASE_EXPIRED = "lease_expired"
    LEASES_RENEWED = "leases_renewed"
    WORKER_REGISTERED = "worker_registered"
    WORKER_UPDATED = "worker_updated"
    WORKER_REMOVED = "worker_removed"
    WORKER_DISCOVERED = "worker_discovered"
    WORKER_OFFLINE = "worker_offline"
    WORKER_PAUSED = "worker_paused"
    WORKER_URL_SET = "worker_url_set"
    WORKER_URL_PROPOSED = "worker_url_proposed"
    WORKER_URL_APPROVED = "worker_url_approved"
    CONFIG_UPDATED = "config_updated"
    CONNECTION_TEST = "connection_test"
    LEADERSHIP_PROMOTE = "leadership_promote"
    PROJECT_CREATED = "project_created"
    PROJECT_DELETED = "project_deleted"
    PROJECT_CLONED = "project_cloned"
    PROJECT_PROPAGATED = "project_propagated"
    MEMORY_SYNC_PULL = "memory_sync_pull"
    MEMORY_SYNC_PUSH = "memory_sync_push"
    LOGIN_LOCKED_OUT = "login_locked_out"
    BUDGET_SET = "budget_set"
    BUDGET_REMOVED = "budget_removed"
    BUDGET_WARNING = "budget_warning"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TOOL_POLICY_SET = "tool_policy_set"
    TOOL_POLICY_REMOVED = "tool_policy_removed"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_APPROVED = "approval_approved"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_EXPIRED = "approval_expired"
    TOOL_CALL = "tool_call"


LOCKED_USERNAME = "username"
LOCKED_ADDRESS = "client_address"
"""What failed logins lock out: a user name (known or not), or a client address."""
ENTITY_TYPES = (
    "llm_task",
    "lease",
    "worker",
    "runtime_config",
    "membridge_project",
    "budget",
    "tool_policy",
    "managed_project",
    LOCKED_USERNAME,
    LOCKED_ADDRESS,
)
"""What an entry can be about (its `entity_type`), one per builder below."""


def _entry(
    action: AuditAction,
    entity_type: str,
    entity_id: str,
    *,
    now: int,
    actor: str,
    detail: str,
    task_id: str | None = None,
) -> AuditEntry:
    return AuditEntry(
        id=new_id(now),
        timestamp=now,
        action=action,
        entity_type=entity_type,
        entity_id=entity_id,
        actor=actor,
        detail=detail,
        task_id=task_id,
    )


def task_audit(
    action: AuditAction, task_id: str, *, now: int, actor: str, detail: str
) -> AuditEntry:
    """Something that happened to a task."""
    return _entry(action, "llm_task", task_id, now=now, actor=actor, detail=detail, task_id=task_id)


def lease_audit(
    action: AuditAction, lease: Lease, *, now: int, actor: str, detail: str
) -> AuditEntry:
    """Something that happened to a lease (listed with its task's entries too)."""
    return _entry(
        action, "lease", lease.id, now=now, actor=actor, detail=detail, task_id=lease.task_id
    )


def worker_audit(
    action: AuditAction,
    worker_id: str,
    *,
    now: int,
    actor: str,
    detail: str,
    task_id: str | None = None,
) -> AuditEntry:
    """Something that happened to a worker; `task_id` when a task's attempt caused it."""
    return _entry(action, "worker", worker_id, now=now, actor=actor, detail=detail, task_id=task_id)


def config_audit(action: AuditAction, *, now: int, actor: str, detail: str) -> AuditEntry:
    """Something that happened to the runtime's one settings row (the Membridge connection)."""
    return _entry(action, "runtime_config", "singleton", now=now, actor=actor, detail=detail)


def leases_audit(action: AuditAction, *, now: int, actor: str, detail: str) -> AuditEntry:
    """Something done to every active lease at once (after an outage of ours)."""
    return _entry(action, "lease", "all-active", now=now, actor=actor, detail=detail)


def project_audit(
    action: AuditAction, canonical_id: str, *, now: int, actor: str, detail: str
) -> AuditEntry:
    """Something done to a Membridge project through the runtime's proxy."""
    return _entry(action, "membridge_project", canonical_id, now=now, actor=actor, detail=detail)


def tool_policy_audit(
    action: AuditAction, project: str, *, now: int, actor: str, detail: str
) -> AuditEntry:
    """Something done to a project's default tool policy."""
    return _entry(action, "tool_policy", project, now=now, actor=actor, detail=detail)


def budget_audit(
    action: AuditAction,
    project: str,
    *,
    now: int,
    actor: str,
    detail: str,
    task_id: str | None = None,
) -> AuditEntry:
    """Something that happened to a project's budget; `task_id` when a task's cost caused it."""
    return _entry(action, "budget", project, now=now, actor=actor, detail=detail, task_id=task_id)


def managed_project_audit(
    action: AuditAction, project_id: str, *, now: int, actor: str, detail: str
) -> AuditEntry:
    """Something done to a managed project (a repository cloned onto nodes), by its id."""
    return _entry(action, "managed_project", project_id, now=now, actor=actor, detail=detail)


def lockout_audit(kind: str, subject: str, *, now: int, actor: str, detail: str) -> AuditEntry:
    """Failed logins locked out a user name or a client address (`kind`) for a while."""
    return _entry(AuditAction.LOGIN_LOCKED_OUT, kind, subject, now=now, actor=actor, detail=detail)
