"""What a claim's first look may conclude from a read alone (`missed_at_a_glance`): nothing to
take or no slot, else the look is made (it must grant, deliver, bring the worker online, or
refuse it)."""

from dataclasses import replace
from typing import Any

import pytest

from bloom.domain.claims import Glance, Missed, missed_at_a_glance
from bloom.domain.models import Worker
from bloom.domain.states import WorkerStatus

NOW = 1_800_000_000_000


def glance(*, has_assigned: bool = False, queue_ready: bool = False, **fields: Any) -> Glance:
    worker = Worker(
        id="w1",
        node_id="",
        url="",
        status=WorkerStatus.ONLINE,
        capabilities={"claude_cli": True, "max_concurrency": 2},
        last_heartbeat=NOW - 15_000,
        ip_addrs=[],
        obs_count=0,
        db_sha="",
        registered_at=NOW - 60_000,
        active_leases=0,
        agent_version="",
        os_info="",
        install_method="",
    )
    return Glance(replace(worker, **fields), has_assigned, queue_ready)


def test_an_idle_worker_and_an_empty_queue_find_nothing() -> None:
    assert missed_at_a_glance(glance(), NOW) is Missed.NOTHING
    assert missed_at_a_glance(glance(paused_until=NOW), NOW) is Missed.NOTHING  # pause over


@pytest.mark.parametrize(
    "fields",
    [
        {"paused_until": NOW + 1},
        {"capabilities": {"claude_cli": True, "max_concurrency": 1, "ready": False}},
        {"capabilities": {"claude_cli": True, "max_concurrency": 0}},
    ],
)
def test_a_worker_that_can_take_nothing_now_is_unable(fields: dict[str, Any]) -> None:
    assert missed_at_a_glance(glance(**fields), NOW) is Missed.UNABLE
    assert missed_at_a_glance(glance(queue_ready=True, **fields), NOW) is Missed.UNABLE


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        ({"queue_ready": True}, {}),  # a task some claim may take: the look decides
        ({"has_assigned": True}, {}),  # a pushed lease to deliver
        ({}, {"status": WorkerStatus.OFFLINE}),  # the claim brings it online
        ({}, {"source": "membridge"}),  # the claim makes it speak for itself
        ({}, {"capabilities": {"claude_cli": False}}),  # the look refuses it
        ({}, {"active_leases": 1}),  # a lease in flight: its sign of life is written at once
        ({}, {"active_leases": 2}),
    ],
)
def test_the_look_is_made_when_a_read_cannot_tell(
    flags: dict[str, bool], fields: dict[str, Any]
) -> None:
    assert missed_at_a_glance(glance(**flags, **fields), NOW) is None


def test_no_worker_is_for_the_look_to_refuse() -> None:
    assert missed_at_a_glance(None, NOW) is None
