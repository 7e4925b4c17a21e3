"""What the runtime's `/metrics` reports: gauges read from the database at each scrape (the same
from every process and replica), and counters and histograms of what this process did."""

from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from bloom.domain.budget import Crossing
from bloom.domain.clis import cli_label
from bloom.domain.clock import Clock
from bloom.domain.models import Lease, Task
from bloom.domain.stall import OnStall
from bloom.domain.states import TaskStatus, WorkerStatus
from bloom.domain.usage import Usage
from bloom.runtime.storage.repositories import RuntimeDatabase

MAX_PROJECT_LABELS = 50
OTHER_PROJECTS = "other"
SECONDS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

TASK_OUTCOMES = Counter(
    "bloom_task_outcomes_total",
    "Attempts ended by a complete, by the task's next status "
    "(completed, queued for a retry, failed, dead, cancelled) and its agent CLI.",
    ["status", "cli"],
)
QUEUE_WAIT = Histogram(
    "bloom_task_queue_wait_seconds",
    "From a task's (re)queueing to its lease.",
    buckets=SECONDS,
)
RUN_TIME = Histogram(
    "bloom_task_run_seconds",
    "From a lease's start to its complete: one attempt's run time.",
    buckets=SECONDS,
)
LEASES_EXPIRED = Counter(
    "bloom_leases_expired_total", "Leases the reaper expired (their worker went quiet)."
)
REAPER_ACTIONS = Counter(
    "bloom_reaper_actions_total",
    "What the reaper did with the task of an expired lease.",
    ["action"],
)
TASK_STALLS = Counter(
    "bloom_task_stalls_total",
    "Runs found stalled (no output past their stall_sec while heartbeating), by what was done: "
    "flag (noticed) or retry (stopped, the task retried).",
    ["on_stall"],
)
CLAIM_SECONDS = Histogram(
    "bloom_claim_seconds",
    "A worker's claim, from its call to its answer, by whether it was given work.",
    ["result"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 15, 30, 60, 120),
)
USAGE_COST = Counter(
    "bloom_usage_cost_usd_total",
    "What attempts cost as their workers reported it, in US dollars, by project (a task's "
    "agent_slug; see bloom_usage_tokens_total for the label's bound) and agent CLI.",
    ["project", "cli"],
)
USAGE_TOKENS = Counter(
    "bloom_usage_tokens_total",
    f"Tokens attempts used, by project, agent CLI and kind (input, output). The first "
    f"{MAX_PROJECT_LABELS} projects a process sees get a label of their own; the rest are "
    f"counted under '{OTHER_PROJECTS}'.",
    ["project", "cli", "kind"],
)
BUDGET_MARKS = Counter(
    "bloom_budget_marks_total",
    "Budgets a complete's cost took past a mark, by project, window (daily, monthly) and mark "
    "(warning at 80 %, exhausted at 100 %: the project's queued tasks wait for the reset).",
    ["project", "window", "mark"],
)


class BoundedLabels:
    """Label values that cannot grow without bound: the first `limit` distinct values keep
    their own, later ones become `other`."""

    def __init__(self, limit: int, other: str):
        self.limit = limit
        self.other = other
        self.kept: set[str] = set()

    def __call__(self, value: str) -> str:
        if value not in self.kept and len(self.kept) >= self.limit:
            return self.other
        self.kept.add(value)
        return value


_project_label = BoundedLabels(MAX_PROJECT_LABELS, OTHER_PROJECTS)


def granted(task: Task, now: int) -> None:
    """A lease was made for `task` (pushed or claimed): how long it waited in the queue."""
    if task.queued_at is not None:
        QUEUE_WAIT.observe(max(now - task.queued_at, 0) / 1000)


def claim_answered(granted: bool, seconds: float) -> None:
    CLAIM_SECONDS.labels("granted" if granted else "empty").observe(seconds)


def attempt_ended(task: Task, lease: Lease, now: int) -> None:
    """A complete was committed: the task's next status and CLI, and the attempt's run time."""
    TASK_OUTCOMES.labels(str(task.status), cli_label(task.cli)).inc()
    RUN_TIME.observe(max(now - lease.started_at, 0) / 1000)


def usage_recorded(task: Task, usage: Usage) -> None:
    """A result with `usage` was committed for `task` (counted by its project and CLI)."""
    project, cli = _project_label(task.agent_slug), cli_label(task.cli)
    if usage.cost_usd:
        USAGE_COST.labels(project, cli).inc(usage.cost_usd)
    for kind, tokens in (("input", usage.input_tokens), ("output", usage.output_tokens)):
        if tokens:
            USAGE_TOKENS.labels(project, cli, kind).inc(tokens)


def budget_crossed(project: str, crossing: Crossing) -> None:
    mark = "exhausted" if crossing.exhausted else "warning"
    BUDGET_MARKS.labels(_project_label(project), str(crossing.window), mark).inc()


def lease_reaped(next_status: TaskStatus | None) -> None:
    """The reaper expired a lease; its task went to `next_status` (None: it had moved on)."""
    LEASES_EXPIRED.inc()
    if next_status is not None:
        REAPER_ACTIONS.labels(
            "requeued" if next_status == TaskStatus.QUEUED else str(next_status)
        ).inc()


def run_stalled(on_stall: OnStall) -> None:
    """The reaper found a run stalled and did `on_stall`."""
    TASK_STALLS.labels(str(on_stall)).inc()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The database's state, for gauges."""

    tasks: dict[str, int]
    workers: dict[str, int]
    free_slots: int
    leases_active: int
    leases_stalled: int
    approvals_pending: int = 0


class MetricsService:
    def __init__(self, db: RuntimeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def snapshot(self) -> Snapshot:
        async with self.db.read() as tx:
            tasks, _ = await tx.counts.totals()
            workers = await tx.workers.find()
            active = await tx.leases.active_counts()
            leases_active, leases_stalled = await tx.stalls.active_and_stalled()
            approvals_pending = await tx.approvals.pending_count()
        now = self.clock()
        by_status = {str(status): 0 for status in WorkerStatus}
        free = 0
        for worker in workers:
            by_status[str(worker.status)] = by_status.get(str(worker.status), 0) + 1
            paused = worker.paused_until is not None and worker.paused_until > now
            if (
                worker.status == WorkerStatus.ONLINE
                and worker.claude_cli
                and worker.ready
                and not paused
            ):
                free += max(worker.max_concurrency - active.get(worker.id, 0), 0)
        return Snapshot(
            tasks={str(status): tasks.get(str(status), 0) for status in TaskStatus},
            workers=by_status,
            free_slots=free,
            leases_active=leases_active,
            leases_stalled=leases_stalled,
            approvals_pending=approvals_pending,
        )
