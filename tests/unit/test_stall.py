"""Stalled runs, as the domain decides them (time passed in): a task's stall policy from its
stored policy and the runtime's default, since when a run has been silent, whether it is stalled;
and how a stall is asked for (`bloom task submit`) and shown (`bloom task show`, `bloom mcp`)."""

import io

import pytest
from rich.console import Console

from bloom.cli.task import task_body
from bloom.cli.task_views import print_task
from bloom.clients.wire import TaskInfo
from bloom.domain.stall import (
    OnStall,
    Stall,
    StallPolicy,
    is_stalled,
    silence,
    silent_since,
    stall_sec_problem,
)
from bloom.mcp.fleet import task_view
from tests.support.wire import task

NOW = 1_750_000_000_000
MIN = 60_000


@pytest.mark.parametrize(
    ("policy", "default", "expected"),
    [
        ({}, 600, StallPolicy(600, OnStall.FLAG)),
        ({"stall_sec": 90}, 600, StallPolicy(90, OnStall.FLAG)),
        ({"stall_sec": 0, "on_stall": "retry"}, 600, StallPolicy(0, OnStall.RETRY)),
        ({"on_stall": "retry"}, 0, StallPolicy(0, OnStall.RETRY)),
        ({"stall_sec": "90", "on_stall": "kill"}, 300, StallPolicy(300, OnStall.FLAG)),
        ({"stall_sec": True}, 300, StallPolicy(300, OnStall.FLAG)),
    ],
)
def test_a_tasks_stall_policy_is_its_own_else_the_runtimes_default_and_flag(
    policy: dict[str, object], default: int, expected: StallPolicy
) -> None:
    assert StallPolicy.of(policy, default) == expected


def test_a_run_is_silent_since_its_newest_output_of_this_attempt_or_since_it_reached_its_worker():
    assert silent_since(started_at=1_000, claimed_at=None, last_output_at=None) == 1_000
    assert silent_since(started_at=1_000, claimed_at=2_000, last_output_at=None) == 2_000
    assert silent_since(started_at=1_000, claimed_at=2_000, last_output_at=5_000) == 5_000
    # the task's output of an earlier attempt does not count for this one
    assert silent_since(started_at=1_000, claimed_at=2_000, last_output_at=1_500) == 2_000


def test_a_run_is_stalled_only_when_silent_for_longer_than_its_stall_sec_and_that_is_not_0():
    ten = StallPolicy(600)
    assert not is_stalled(NOW, NOW - 10 * MIN, ten)  # exactly the limit: not longer
    assert is_stalled(NOW, NOW - 10 * MIN - 1, ten)
    assert not is_stalled(NOW, NOW - 9 * MIN, ten)
    assert not is_stalled(NOW, NOW - 1000 * MIN, StallPolicy(0, OnStall.RETRY))


@pytest.mark.parametrize(
    ("value", "valid"),
    [(0, True), (1, False), (29, False), (30, True), (86_400, True), (86_401, False), (-5, False)],
)
def test_stall_sec_is_0_or_30_to_86400(value: int, valid: bool) -> None:
    assert (stall_sec_problem(value) is None) is valid


def test_a_silence_reads_in_seconds_then_whole_minutes() -> None:
    assert silence(45_000) == "45 s"
    assert silence(119_999) == "119 s"
    assert silence(12 * MIN + 59_000) == "12 min"
    assert silence(-5) == "0 s"
    assert Stall("l1", "w1", NOW, NOW - 11 * MIN).silent_for(NOW + MIN) == "12 min"


def test_submit_sends_the_stall_options_only_when_given() -> None:
    assert "policy" not in task_body("hi")
    body = task_body("hi", stall_sec=0, on_stall="retry")
    assert body["policy"] == {"stall_sec": 0, "on_stall": "retry"}


def shown(info: TaskInfo) -> str:
    buffer = io.StringIO()
    print_task(Console(file=buffer, width=200, color_system=None), info, [], None)
    return buffer.getvalue()


def test_show_tells_a_stalled_run_and_the_stall_policy() -> None:
    text = shown(
        task(
            "running",
            worker_id="w1",
            policy={"timeout_sec": 120, "budget": 0, "stall_sec": 300, "on_stall": "retry"},
            stall={"lease_id": "l1", "worker_id": "w1", "stalled_at": NOW, "silent_since": 1_000},
        )
    )
    assert "timeout 120s, budget $0, stall 300s, on stall retry" in text
    assert "stalled" in text
    assert "no output for" in text
    assert "on worker w1" in text
    assert "stall" not in shown(task("running", worker_id="w1"))


def test_a_models_view_of_a_task_tells_its_stall() -> None:
    stall = {"lease_id": "l1", "worker_id": "w1", "stalled_at": NOW, "silent_since": NOW - 11 * MIN}
    view = task_view(task("running", worker_id="w1", stall=stall))
    assert (
        view["stalled"] == "no output since 2025-06-15 14:55 UTC on worker w1, though it heartbeats"
    )
    assert "stalled" not in task_view(task("running", worker_id="w1"))
