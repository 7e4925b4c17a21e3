from bloom.domain.audit import (
    ENTITY_TYPES,
    LOCKED_ADDRESS,
    LOCKED_USERNAME,
    AuditAction,
    budget_audit,
    config_audit,
    lease_audit,
    leases_audit,
    lockout_audit,
    managed_project_audit,
    project_audit,
    task_audit,
    tool_policy_audit,
    worker_audit,
)
from bloom.domain.models import Lease
from bloom.domain.states import LeaseStatus


def test_an_entry_about_a_task_is_listed_with_the_task() -> None:
    entry = task_audit(AuditAction.TASK_CREATED, "t1", now=5, actor="admin", detail="made")
    assert (entry.action, entry.entity_type, entry.entity_id, entry.task_id) == (
        "task_created",
        "llm_task",
        "t1",
        "t1",
    )
    assert (entry.timestamp, entry.actor, entry.detail) == (5, "admin", "made")


def test_an_entry_about_a_lease_names_the_lease_and_its_task() -> None:
    lease = Lease("l1", "t1", "w1", 1, 2, 300, LeaseStatus.EXPIRED, 1, None)
    entry = lease_audit(AuditAction.LEASE_EXPIRED, lease, now=5, actor="reaper", detail="")
    assert (entry.entity_type, entry.entity_id, entry.task_id) == ("lease", "l1", "t1")


def test_an_entry_about_a_worker_names_a_task_only_when_one_caused_it() -> None:
    quiet = worker_audit(AuditAction.WORKER_OFFLINE, "w1", now=5, actor="reaper", detail="")
    paused = worker_audit(
        AuditAction.WORKER_PAUSED, "w1", now=5, actor="w1", detail="", task_id="t1"
    )
    assert (quiet.entity_type, quiet.task_id, paused.task_id) == ("worker", None, "t1")


def test_every_builders_entity_type_is_one_the_audit_page_offers_as_a_filter() -> None:
    lease = Lease("l1", "t1", "w1", 1, 2, 300, LeaseStatus.EXPIRED, 1, None)
    made = [
        task_audit(AuditAction.TASK_CREATED, "t1", now=5, actor="a", detail=""),
        lease_audit(AuditAction.LEASE_EXPIRED, lease, now=5, actor="a", detail=""),
        leases_audit(AuditAction.LEASES_RENEWED, now=5, actor="a", detail=""),
        worker_audit(AuditAction.WORKER_OFFLINE, "w1", now=5, actor="a", detail=""),
        config_audit(AuditAction.CONFIG_UPDATED, now=5, actor="a", detail=""),
        project_audit(AuditAction.LEADERSHIP_PROMOTE, "c1", now=5, actor="a", detail=""),
        budget_audit(AuditAction.BUDGET_WARNING, "p1", now=5, actor="a", detail="", task_id="t1"),
        tool_policy_audit(AuditAction.TOOL_POLICY_SET, "p1", now=5, actor="a", detail=""),
        managed_project_audit(AuditAction.PROJECT_CREATED, "p1", now=5, actor="a", detail=""),
        lockout_audit(LOCKED_USERNAME, "ada", now=5, actor="198.51.100.1", detail=""),
        lockout_audit(LOCKED_ADDRESS, "198.51.100.1", now=5, actor="198.51.100.1", detail=""),
    ]
    assert {entry.entity_type for entry in made} == set(ENTITY_TYPES)
    assert made[-1].action == "login_locked_out"
