"""What a worker reports at its agent surface's `/metrics` (Prometheus' text format): the
attempts it ran and how they ended, how long they ran and what they cost (each by agent CLI),
its claims, and at each scrape its running tasks and slots. A registry of its own: nothing of a
server's."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from bloom.domain.clis import cli_label
from bloom.worker.agents.outcome import Outcome

REGISTRY = CollectorRegistry()
ATTEMPTS = Counter(
    "bloom_worker_attempts_total",
    "Attempts this worker ran to the end, by outcome (success, or the error code reported) and "
    "agent CLI.",
    ["outcome", "cli"],
    registry=REGISTRY,
)
RUN_SECONDS = Histogram(
    "bloom_worker_attempt_run_seconds",
    "How long the agent CLI ran for one attempt, by CLI.",
    ["cli"],
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)
COST = Counter(
    "bloom_worker_cost_usd_total",
    "What this worker's attempts cost, as the agent CLI reported it or its price table says (US "
    "dollars), by CLI.",
    ["cli"],
    registry=REGISTRY,
)
CLAIMS = Counter(
    "bloom_worker_claims_total",
    "Claims this worker made, by result: granted, empty (the long-poll ended with no task) or "
    "failed (the runtime could not be reached or refused).",
    ["result"],
    registry=REGISTRY,
)
RUNNING = Gauge("bloom_worker_running_tasks", "Tasks running here now.", registry=REGISTRY)
SLOTS = Gauge("bloom_worker_slots", "Tasks this worker runs at once.", registry=REGISTRY)


def attempt_ended(outcome: Outcome, run_ms: int, cli: str) -> None:
    """An attempt of a task for the agent CLI `cli` ended with `outcome` after `run_ms`."""
    label = cli_label(cli)
    ATTEMPTS.labels(
        "success" if outcome.success else str(outcome.error_code or "error"), label
    ).inc()
    RUN_SECONDS.labels(label).observe(max(run_ms, 0) / 1000)
    cost = outcome.metrics.get("cost_usd")
    if isinstance(cost, int | float) and cost > 0:
        COST.labels(label).inc(cost)


def claim_answered(result: str) -> None:
    CLAIMS.labels(result).inc()


def scrape(running: int, slots: int) -> bytes:
    """The text a scrape gets, the gauges read now."""
    RUNNING.set(running)
    SLOTS.set(slots)
    return generate_latest(REGISTRY)
