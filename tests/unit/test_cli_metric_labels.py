"""The metrics' `cli` label: a task's agent CLI counted beside its project (the runtime) and
beside an attempt's outcome and cost (the worker), bounded to the known names."""

from prometheus_client import REGISTRY

from bloom.domain.clis import CLIS, cli_label
from bloom.domain.models import Lease, Task
from bloom.domain.retry import ErrorCode
from bloom.domain.states import LeaseStatus, TaskStatus
from bloom.domain.usage import Usage
from bloom.runtime.services import metrics
from bloom.worker import metrics as worker_metrics
from bloom.worker.agents.outcome import Outcome


def task(cli: str, project: str = "labels-proj") -> Task:
    return Task(
        id="t1",
        context_id="c",
        agent_slug=project,
        prompt="p",
        context_hints=[],
        policy={},
        desired_format="text",
        status=TaskStatus.COMPLETED,
        created_at=0,
        updated_at=0,
        lease_id=None,
        worker_id="w1",
        attempts=1,
        max_attempts=3,
        cli=cli,
    )


def runtime_value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def worker_value(name: str, **labels: str) -> float:
    return worker_metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_label_is_a_known_cli_or_other() -> None:
    assert [cli_label(name) for name in CLIS] == list(CLIS)
    assert {cli_label(name) for name in ("aider", "", "Claude", "codex " * 100)} == {"other"}


def test_the_runtime_counts_usage_and_outcomes_by_project_and_cli() -> None:
    usage = Usage(cost_usd=0.25, input_tokens=100, output_tokens=7)
    lease = Lease("l1", "t1", "w1", 0, 1, 1, LeaseStatus.ACTIVE, 0, "c")
    cost = ("bloom_usage_cost_usd_total", {"project": "labels-proj"})
    tokens = ("bloom_usage_tokens_total", {"project": "labels-proj", "kind": "input"})
    outcomes = ("bloom_task_outcomes_total", {"status": "completed"})
    before = {
        (name, cli): runtime_value(name, **labels, cli=cli)
        for name, labels in (cost, tokens, outcomes)
        for cli in ("codex", "claude", "other")
    }
    metrics.usage_recorded(task("codex"), usage)
    metrics.attempt_ended(task("codex"), lease, 5)
    metrics.usage_recorded(task("aider"), usage)  # a name no CLI has: `other`, never its own

    def grew(name: str, cli: str, **labels: str) -> float:
        return runtime_value(name, **labels, cli=cli) - before[name, cli]

    assert grew(cost[0], "codex", **cost[1]) == 0.25
    assert grew(tokens[0], "codex", **tokens[1]) == 100
    assert grew(outcomes[0], "codex", **outcomes[1]) == 1
    assert grew(cost[0], "claude", **cost[1]) == 0
    assert grew(outcomes[0], "claude", **outcomes[1]) == 0
    assert grew(cost[0], "other", **cost[1]) == 0.25
    assert runtime_value(cost[0], **cost[1], cli="aider") == 0


def test_the_worker_counts_attempts_run_time_and_cost_by_cli() -> None:
    done = Outcome(True, output="ok", metrics={"cost_usd": 0.5})
    failed = Outcome(False, error_message="no", error_code=ErrorCode.AUTH_FAILED, metrics={})
    attempts = "bloom_worker_attempts_total"
    before = {
        cli: (
            worker_value(attempts, outcome="success", cli=cli),
            worker_value(attempts, outcome="auth_failed", cli=cli),
            worker_value("bloom_worker_cost_usd_total", cli=cli),
            worker_value("bloom_worker_attempt_run_seconds_count", cli=cli),
        )
        for cli in ("codex", "gemini", "other")
    }
    worker_metrics.attempt_ended(done, 2000, "codex")
    worker_metrics.attempt_ended(failed, 10, "gemini")
    worker_metrics.attempt_ended(done, 10, "aider")

    def grew(cli: str) -> tuple[float, ...]:
        now = (
            worker_value(attempts, outcome="success", cli=cli),
            worker_value(attempts, outcome="auth_failed", cli=cli),
            worker_value("bloom_worker_cost_usd_total", cli=cli),
            worker_value("bloom_worker_attempt_run_seconds_count", cli=cli),
        )
        return tuple(a - b for a, b in zip(now, before[cli], strict=True))

    assert grew("codex") == (1, 0, 0.5, 1)
    assert grew("gemini") == (0, 1, 0, 1)
    assert grew("other") == (1, 0, 0.5, 1)
    assert worker_value(attempts, outcome="success", cli="aider") == 0
