"""`bloom bench --graph`'s graphs (a fan-in; layers, the same every run) and its judgement of a
grant made before a dependency completed, on the bench's clock and on the server's."""

import pytest

from bloom.bench.graph import (
    GraphOptions,
    GraphUsageError,
    Shape,
    _Drain,
    _stored_early,
    fan_in,
    layers,
    plan_of,
)
from bloom.runtime.storage.ledger import TaskLedger


def test_a_fan_in_waits_for_every_task_before_it():
    assert fan_in(3) == [(), (), (), (0, 1, 2)]


def test_layers_wait_for_one_to_three_tasks_of_the_layer_before_the_same_every_run():
    plan = layers(1000, 100)
    assert plan == layers(1000, 100)
    assert plan != layers(1000, 100, seed=36)
    assert plan[:100] == [()] * 100
    for n, waits in enumerate(plan[100:], start=100):
        layer_start = n - n % 100
        assert 1 <= len(waits) <= 3
        assert len(set(waits)) == len(waits)
        assert all(layer_start - 100 <= m < layer_start for m in waits), (n, waits)
    assert {len(waits) for waits in plan[100:]} == {1, 2, 3}
    assert {m for waits in plan[100:] for m in waits} >= {0, 99, 899}


def test_a_last_layer_may_be_short_and_a_narrow_one_is_waited_on_whole():
    plan = layers(5, 2)
    assert plan[:2] == [(), ()]
    assert all(len(waits) <= 2 for waits in plan)
    assert all(m in (2, 3) for m in plan[4])
    assert layers(4, 1) == [(), (0,), (1,), (2,)]


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (GraphOptions(size=1000), "1 to 999 dependencies"),
        (GraphOptions(size=1001, shape=Shape.LAYERS), "2 to 1000 tasks"),
        (GraphOptions(size=10, shape=Shape.LAYERS, width=10), "two layers at least"),
        (GraphOptions(size=10, workers=0), "at least 1 worker"),
    ],
)
def test_options_that_make_no_graph_are_refused(options: GraphOptions, refusal: str):
    with pytest.raises(GraphUsageError, match=refusal):
        plan_of(options)


def test_a_grant_before_a_dependency_s_complete_was_sent_is_early_on_the_bench_s_clock():
    drain = _Drain(["a", "b", "c"], {"c": ("a", "b")}, linger=True)
    drain.sent |= {"a": 1.0, "b": 2.0}
    drain.granted["c"] = 2.5
    assert not drain.granted_early("c")
    drain.granted["c"] = 1.5
    assert drain.granted_early("c")
    del drain.sent["a"]
    drain.granted["c"] = 3.0
    assert drain.granted_early("c")  # a dependency never completed


def test_a_lease_that_started_before_a_dependency_s_result_is_early_on_the_server_s_clock():
    stored = {
        "a": TaskLedger(granted_at=[10], completed_at=[20]),
        "b": TaskLedger(granted_at=[11], completed_at=[30]),
        "c": TaskLedger(granted_at=[30]),
    }
    assert not _stored_early(stored, "c", ("a", "b"))  # the same millisecond: that complete's
    stored["c"].granted_at = [29, 31]
    assert _stored_early(stored, "c", ("a", "b"))
    stored["c"].granted_at = [31]
    stored["b"].completed_at = []
    assert _stored_early(stored, "c", ("a", "b"))
    assert not _stored_early(stored, "a", ())
