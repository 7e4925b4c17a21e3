"""The runtime's tables, for PostgreSQL and SQLite alike (SQLAlchemy Core).

Seed tables keep the seed's names and columns; what we add is marked. Timestamps are epoch-ms
BIGINTs (SQLite would drop tzinfo), JSON is JSONB on PostgreSQL and JSON text on SQLite.
"""

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    text,
)

from bloom.db.columns import NAMING_CONVENTION, JSONType

metadata = MetaData(naming_convention=NAMING_CONVENTION)

QUEUED_ONLY = text("status = 'queued'")
ACTIVE_ONLY = text("status = 'active'")
HAS_WORKSPACE = text("workspace_key IS NOT NULL")

llm_tasks = Table(
    "llm_tasks",
    metadata,
    Column("id", String, primary_key=True),
    Column("context_id", Text, nullable=False),
    Column("agent_slug", Text, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("context_hints", JSONType, nullable=False),
    Column("policy", JSONType, nullable=False),
    Column("desired_format", Text, nullable=False, server_default="text"),
    Column("status", Text, nullable=False, server_default="queued"),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("lease_id", String),
    Column("worker_id", String),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False, server_default="3"),
    # ours
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("idempotency_key", String),
    Column("request_hash", String),
    Column("queued_at", BigInteger),
    Column("not_before", BigInteger),
    Column("cancel_requested", Boolean, nullable=False, server_default=false()),
    Column("last_error", Text),
    Column("session_id", String),
    Column("workspace", JSONType),
    Column("workspace_key", Text),  # repo and branch: written by one task at a time
    # ours: task graphs (docs/graphs.md, migration 0015)
    Column("dependencies", Integer, nullable=False, server_default="0"),
    Column("waiting_on", Integer, nullable=False, server_default="0"),
    Column("has_dependents", Boolean, nullable=False, server_default=false()),
    Column("on_dependency_failure", Text),
    Column("cancelled_for", String),
    Column("cli", Text, nullable=False, server_default="claude"),  # its agent CLI
)
# The claim query walks this index in order and stops at the first claimable row, so its cost
# does not grow with the number of queued tasks.
Index(
    "ix_llm_tasks_queue",
    llm_tasks.c.priority.desc(),
    llm_tasks.c.created_at,
    llm_tasks.c.id,
    postgresql_where=QUEUED_ONLY,
    sqlite_where=QUEUED_ONLY,
)
Index(
    "ix_llm_tasks_queued_context",
    llm_tasks.c.context_id,
    postgresql_where=QUEUED_ONLY,
    sqlite_where=QUEUED_ONLY,
)
Index("ix_llm_tasks_created_at", llm_tasks.c.created_at)
Index("ix_llm_tasks_status_created_at", llm_tasks.c.status, llm_tasks.c.created_at)
Index("ix_llm_tasks_idempotency_key", llm_tasks.c.idempotency_key, unique=True)
# ours: the dashboard's listings of one worker's, context's, agent's or CLI's tasks, newest first
# (without them, one with few or only old tasks has the newest-first scan read the whole table)
Index("ix_llm_tasks_worker_created_at", llm_tasks.c.worker_id, llm_tasks.c.created_at)
Index("ix_llm_tasks_context_created_at", llm_tasks.c.context_id, llm_tasks.c.created_at)
Index("ix_llm_tasks_agent_created_at", llm_tasks.c.agent_slug, llm_tasks.c.created_at)
Index("ix_llm_tasks_cli_created_at", llm_tasks.c.cli, llm_tasks.c.created_at)
# ours: a workspace task is claimed only while no other task of its branch is in flight
Index(
    "ix_llm_tasks_workspace_key",
    llm_tasks.c.workspace_key,
    llm_tasks.c.status,
    postgresql_where=HAS_WORKSPACE,
    sqlite_where=HAS_WORKSPACE,
)

# ours: tasks per status and leases ever granted, kept by the database itself (migration 0011's
# triggers on llm_tasks and leases, in the changing transaction), so the dashboard and /stats read
# a few rows instead of counting every task. The counts are the sums over all slots: PostgreSQL
# spreads concurrent transactions over 32 slot rows (fillfactor 10, so that their updates stay
# HOT), SQLite (one writer) uses slot 0. A migration that rebuilds llm_tasks or leases on SQLite
# (batch mode) drops their triggers: it must create them again.
task_counts = Table(
    "task_counts",
    metadata,
    Column("slot", Integer, primary_key=True, autoincrement=False),
    *(
        Column(name, BigInteger, nullable=False, server_default="0")
        for name in (
            "queued",
            "leased",
            "running",
            "completed",
            "failed",
            "dead",
            "cancelled",
            "awaiting_approval",  # 0014
            "blocked",
        )
    ),
    Column("leases", BigInteger, nullable=False, server_default="0"),
)

# ours: task graphs: `task_id` waits for `depends_on` (docs/graphs.md). `settled` once the
# dependency ended as the task needs (completed; or, for a task that runs anyway, failed):
# each edge counts once in the task's `waiting_on`, however often its dependency is requeued.
task_dependencies = Table(
    "task_dependencies",
    metadata,
    Column("task_id", String, primary_key=True),
    Column("depends_on", String, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("ref", Text),
    Column("settled", Boolean, nullable=False, server_default=false()),
    # its artifacts passed on with its answer (`dependency_artifacts`)
    Column("with_artifacts", Boolean, nullable=False, server_default=false()),
)
Index("ix_task_dependencies_depends_on", task_dependencies.c.depends_on)
Index(
    "ix_llm_tasks_cancelled_for",
    llm_tasks.c.cancelled_for,
    postgresql_where=text("cancelled_for IS NOT NULL"),
    sqlite_where=text("cancelled_for IS NOT NULL"),
)

leases = Table(
    "leases",
    metadata,
    Column("id", String, primary_key=True),
    Column("task_id", String, nullable=False),
    Column("worker_id", String, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("ttl_seconds", Integer, nullable=False),
    Column("status", Text, nullable=False, server_default="active"),
    Column("last_heartbeat", BigInteger, nullable=False),
    Column("context_id", String),
    # ours
    Column("claimed_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("stalled_at", BigInteger),  # when the run was found silent past its stall_sec
)
Index(
    "ix_leases_active_worker",
    leases.c.worker_id,
    postgresql_where=ACTIVE_ONLY,
    sqlite_where=ACTIVE_ONLY,
)
Index(
    "ix_leases_active_expires_at",
    leases.c.expires_at,
    postgresql_where=ACTIVE_ONLY,
    sqlite_where=ACTIVE_ONLY,
)
Index("ix_leases_task_id", leases.c.task_id)
Index("ix_leases_context_started_at", leases.c.context_id, leases.c.started_at)
Index("ix_leases_started_at", leases.c.started_at)

workers = Table(
    "workers",
    metadata,
    Column("id", String, primary_key=True),
    Column("node_id", Text, nullable=False),
    Column("url", Text, nullable=False, server_default=""),
    Column("status", Text, nullable=False, server_default="unknown"),
    Column("capabilities", JSONType, nullable=False),
    Column("last_heartbeat", BigInteger),
    Column("ip_addrs", JSONType, nullable=False),
    Column("obs_count", Integer, nullable=False, server_default="0"),
    Column("db_sha", Text, nullable=False, server_default=""),
    Column("registered_at", BigInteger, nullable=False),
    Column("active_leases", Integer, nullable=False, server_default="0"),
    Column("agent_version", Text, nullable=False, server_default="unknown"),
    Column("os_info", Text, nullable=False, server_default=""),
    Column("install_method", Text, nullable=False, server_default="manual"),
    # ours: "api" once the worker has spoken to the runtime itself (its own word wins over
    # Membridge's), "membridge" while it is known only through the worker sync
    Column("source", Text, nullable=False, server_default="api"),
    Column("membridge_seen_at", BigInteger),
    # ours: epoch ms before which the worker takes no work (a usage limit's reset time)
    Column("paused_until", BigInteger),
    # ours: an agent URL the worker (with a worker key) or Membridge proposed, until an admin
    # approves it; only `url`, which only an admin sets, is ever called
    Column("pending_url", Text),
)

# ours: a task's live output, as its workers post it. `seq` counts 1, 2, 3… per task, assigned by
# the server in arrival order without gaps, across all of the task's attempts.
task_events = Table(
    "task_events",
    metadata,
    Column("task_id", String, primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("lease_id", String),
    Column("worker_id", String),
    Column("type", Text, nullable=False),
    Column("data", JSONType, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
# The retention's pruning walks old events in order of age.
Index("ix_task_events_created_at", task_events.c.created_at)

# ours: how much of its output a task has stored and dropped (BLOOM_EVENTS_MAX_BYTES): one row per
# task with events, counted in the transaction of each append. `marker_seq` is the `truncated`
# event's seq, once the task has one.
task_event_totals = Table(
    "task_event_totals",
    metadata,
    Column("task_id", String, primary_key=True),
    Column("bytes", BigInteger, nullable=False, server_default="0"),
    Column("dropped_events", BigInteger, nullable=False, server_default="0"),
    Column("dropped_bytes", BigInteger, nullable=False, server_default="0"),
    Column("marker_seq", Integer),
    Column("last_at", BigInteger),  # the newest event's arrival, stored or dropped
)

runtime_artifacts = Table(
    "runtime_artifacts",
    metadata,
    Column("id", String, primary_key=True),
    Column("task_id", String, nullable=False),
    Column("job_id", String),
    Column("type", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("finalized", Boolean, nullable=False, server_default=false()),
    Column("url", Text),
    Column("entity_refs", JSONType, nullable=False),
    Column("tags", JSONType, nullable=False),
    Column("content", Text),
    # ours
    Column("sha256", String),
    Column("size_bytes", BigInteger),
    Column("storage", String, nullable=False, server_default="db"),
)
Index("ix_runtime_artifacts_task_id", runtime_artifacts.c.task_id)
Index("ix_runtime_artifacts_created_at", runtime_artifacts.c.created_at)

llm_results = Table(
    "llm_results",
    metadata,
    Column("id", String, primary_key=True),
    Column("task_id", String, nullable=False),
    Column("worker_id", String, nullable=False),
    Column("artifact_id", String),
    Column("status", Text, nullable=False),
    Column("output", Text),
    Column("error_message", Text),
    Column("metrics", JSONType, nullable=False),
    Column("completed_at", BigInteger, nullable=False),
    # ours: one result per lease is what makes complete idempotent, even under a race
    Column("lease_id", String),
    Column("error_code", String),
    # ours: what the attempt cost, typed (copied from `metrics`), so usage sums in SQL
    Column("cost_usd", Float),
    Column("input_tokens", BigInteger),
    Column("output_tokens", BigInteger),
    Column("tokens_used", BigInteger),
    Column("num_turns", Integer),
    Column("duration_ms", BigInteger),
    Column("model", Text),
    Column("workspace", JSONType),  # ours: what the attempt did to its task's branch
)
Index("ix_llm_results_lease_id", llm_results.c.lease_id, unique=True)
Index("ix_llm_results_task_id", llm_results.c.task_id)
# ours: usage over a window, and throughput per bucket that is not whole minutes (the rollups
# below count the rest), read through this index (throughput from it alone: results are never
# updated, so their pages are all-visible and the scan never reads the table)
Index("ix_llm_results_completed_at", llm_results.c.completed_at, llm_results.c.status)

audit_logs = Table(
    "audit_logs",
    metadata,
    Column("id", String, primary_key=True),
    Column("timestamp", BigInteger, nullable=False),
    Column("action", Text, nullable=False),
    Column("entity_type", Text, nullable=False),
    Column("entity_id", String, nullable=False),
    Column("actor", Text, nullable=False),
    Column("detail", Text, nullable=False),
    # ours: the task an entry concerns, whatever its entity (a lease, say), for a task's trail
    Column("task_id", String),
)
Index("ix_audit_logs_timestamp", audit_logs.c.timestamp)
Index("ix_audit_logs_task_id", audit_logs.c.task_id)
Index("ix_audit_logs_entity_id", audit_logs.c.entity_id)  # ours: one entity's trail

# ours: what each project (a task's agent_slug) spent per UTC day, kept with every result that
# reports a cost (in its complete's transaction), so a budget check reads a month in 31 rows
project_spend = Table(
    "project_spend",
    metadata,
    Column("project", Text, primary_key=True),
    Column("day", BigInteger, primary_key=True, autoincrement=False),  # UTC midnight, epoch ms
    Column("cost_usd", Float, nullable=False),
)

# ours: results summed per UTC day, project (the task's agent_slug) and agent CLI, and counted per
# minute and per quarter of an hour, kept by the database itself (migration 0019's triggers on
# llm_results, in the transaction that writes the result), so the overview's cost today and its
# throughput read a few rows instead of every result of the day. A group's figures are the sums
# over its slots (PostgreSQL spreads transactions over 32, as `task_counts` does; SQLite uses
# slot 0); a row may sum to nothing (its results deleted). The distinct tasks of a group are not
# kept: they do not add up.
USAGE_DAY_SUMS = (
    "attempts",
    "succeeded",
    "failed",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "tokens_used",
    "num_turns",
    "duration_ms",
)
usage_days = Table(
    "usage_days",
    metadata,
    Column("day", BigInteger, primary_key=True, autoincrement=False),  # UTC midnight, epoch ms
    Column("project", Text, primary_key=True),
    Column("cli", Text, primary_key=True),
    Column("slot", Integer, primary_key=True, autoincrement=False),
    *(
        Column(name, Float if name == "cost_usd" else BigInteger, nullable=False)
        for name in USAGE_DAY_SUMS
    ),
)


def _counted_per(name: str) -> Table:
    """Results counted per span of time (`start`: the span's start, epoch ms)."""
    return Table(
        name,
        metadata,
        Column("start", BigInteger, primary_key=True, autoincrement=False),
        Column("slot", Integer, primary_key=True, autoincrement=False),
        Column("succeeded", BigInteger, nullable=False),
        Column("failed", BigInteger, nullable=False),  # every status but success, as usage counts
    )


result_minutes = _counted_per("result_minutes")
result_quarters = _counted_per("result_quarters")  # of an hour: a day's chart reads 96 a slot

# ours: spending limits per project, and until when a spent project's queued tasks wait
budgets = Table(
    "budgets",
    metadata,
    Column("project", Text, primary_key=True),
    Column("daily_usd", Float),
    Column("monthly_usd", Float),
    Column("held_until", BigInteger),
    Column("updated_at", BigInteger, nullable=False),
    Column("updated_by", Text, nullable=False),
)

# ours: a project's default tool policy (rules in the Claude CLI's syntax), set by admins and
# merged into each of its tasks' policy at create (docs/approvals.md)
tool_policies = Table(
    "tool_policies",
    metadata,
    Column("project", Text, primary_key=True),
    Column("allow", JSONType, nullable=False),
    Column("deny", JSONType, nullable=False),
    Column("ask", JSONType, nullable=False),
    Column("mode", Text),
    Column("max_turns", Integer),
    Column("allow_bypass", Boolean, nullable=False, server_default=false()),
    Column("updated_at", BigInteger, nullable=False),
    Column("updated_by", Text, nullable=False),
)

# ours: tool calls a person must decide on (a task's `policy.tools.ask`), one per attempt that
# stopped at one (written in that attempt's complete), decided once (docs/approvals.md)
approvals = Table(
    "approvals",
    metadata,
    Column("id", String, primary_key=True),
    Column("task_id", String, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("lease_id", String, nullable=False, unique=True),
    Column("worker_id", String, nullable=False),
    Column("context_id", String, nullable=False),
    Column("session_id", String),
    Column("tool_use_id", String, nullable=False),
    Column("tool_name", Text, nullable=False),
    Column("tool_input", JSONType, nullable=False),
    Column("reason", Text),
    Column("requested_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("on_timeout", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("decided_by", Text),
    Column("decided_at", BigInteger),
    Column("note", Text),
    Column("remember", Boolean, nullable=False, server_default=false()),
    Column("applied_lease", String),  # the run that took the decision (used once)
    # its webhook delivery (docs/approvals.md): when to try (NULL: delivered, or given up)
    Column("notify_at", BigInteger),
    Column("notify_attempts", Integer, nullable=False, server_default="0"),
)
Index("ix_approvals_task_id", approvals.c.task_id)
Index("ix_approvals_notify_at", approvals.c.notify_at)
Index("ix_approvals_status_expires_at", approvals.c.status, approvals.c.expires_at)
Index("ix_approvals_context_id", approvals.c.context_id)

# ours: the queue's depth once a minute (the dashboard's history), kept for eight days
queue_samples = Table(
    "queue_samples",
    metadata,
    Column("at", BigInteger, primary_key=True, autoincrement=False),  # the minute, epoch ms
    Column("queued", Integer, nullable=False),
    Column("running", Integer, nullable=False),  # leased or running
)

runtime_settings = Table(
    "runtime_settings",
    metadata,
    Column("key", String, primary_key=True),
    Column("value", Text, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("id", String, primary_key=True),
    Column("username", Text, nullable=False, unique=True),
    Column("password", Text, nullable=False),  # ours: an scrypt hash, never the password
    # ours
    Column("role", Text, nullable=False, server_default="viewer"),
    Column("created_at", BigInteger, nullable=False, server_default="0"),
)

# ours: keys made with `bloom key create`, stored as SHA-256 hashes
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String, primary_key=True),
    Column("name", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("key_hash", String, nullable=False, unique=True),
    Column("prefix", String, nullable=False),
    Column("worker_id", String),
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger),
)

# The reference's managed projects: git repositories the runtime clones onto nodes through their
# agents, and each one's checkout per node. Ours: a project's name is unique, a node has one row
# per project (written by upsert), and every writer changes the project's row before its nodes'.
managed_projects = Table(
    "managed_projects",
    metadata,
    Column("id", String, primary_key=True),
    Column("name", Text, nullable=False),
    Column("repo_url", Text, nullable=False),
    Column("canonical_id", Text, nullable=False),
    Column("target_path", Text),
    Column("clone_status", Text, nullable=False, server_default="pending"),
    Column("primary_node_id", Text),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("error_message", Text),
)
Index("ix_managed_projects_name", managed_projects.c.name, unique=True)

project_node_status = Table(
    "project_node_status",
    metadata,
    Column("id", String, primary_key=True),
    Column("project_id", String, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("clone_status", Text, nullable=False, server_default="pending"),
    Column("last_sync_at", BigInteger),
    Column("error_message", Text),
    Column("repo_path", Text),
)
Index(
    "ix_project_node_status_project_node",
    project_node_status.c.project_id,
    project_node_status.c.node_id,
    unique=True,
)
